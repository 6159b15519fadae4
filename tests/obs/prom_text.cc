#include "prom_text.h"

#include <cmath>
#include <cstdlib>
#include <sstream>

namespace kvw::obs::test {

namespace {

bool parse_labels(const std::string& s, size_t& i, std::map<std::string, std::string>& out,
                  std::string& err) {
  ++i;  // '{'
  while (i < s.size() && s[i] != '}') {
    size_t eq = s.find('=', i);
    if (eq == std::string::npos || eq + 1 >= s.size() || s[eq + 1] != '"') {
      err = "bad label";
      return false;
    }
    std::string name = s.substr(i, eq - i), value;
    i = eq + 2;
    while (i < s.size() && s[i] != '"') {
      if (s[i] == '\\' && i + 1 < s.size()) {
        char c = s[i + 1];
        if (c == 'n')
          value += '\n';
        else if (c == '\\' || c == '"')
          value += c;
        else {
          err = "bad escape";
          return false;
        }
        i += 2;
      } else {
        if (s[i] == '\n') {
          err = "raw newline in label";
          return false;
        }
        value += s[i++];
      }
    }
    if (i >= s.size()) {
      err = "unterminated label value";
      return false;
    }
    ++i;  // closing quote
    if (out.count(name)) {
      err = "duplicate label " + name;
      return false;
    }
    out[name] = value;
    if (i < s.size() && s[i] == ',') ++i;
  }
  if (i >= s.size()) {
    err = "unterminated label set";
    return false;
  }
  ++i;  // '}'
  return true;
}

double parse_value(const std::string& v, bool& ok) {
  ok = true;
  if (v == "+Inf") return INFINITY;
  if (v == "-Inf") return -INFINITY;
  if (v == "NaN") return NAN;
  char* end = nullptr;
  double d = std::strtod(v.c_str(), &end);
  ok = end && *end == '\0' && !v.empty();
  return d;
}

}  // namespace

Parsed parse_prometheus_text(const std::string& text) {
  Parsed p;
  std::istringstream in(text);
  std::string line, current;
  int lineno = 0;
  while (std::getline(in, line)) {
    ++lineno;
    const std::string where = "line " + std::to_string(lineno) + ": ";
    if (line.empty()) continue;
    if (line.rfind("# HELP ", 0) == 0 || line.rfind("# TYPE ", 0) == 0) {
      const bool help = line[2] == 'H';
      const size_t sp = line.find(' ', 7);
      const std::string name = line.substr(7, sp == std::string::npos ? std::string::npos : sp - 7);
      ParsedFamily& f = p.families[name];
      const std::string rest = sp == std::string::npos ? "" : line.substr(sp + 1);
      if (help) {
        if (f.has_help) p.errors.push_back(where + "second HELP for " + name);
        f.has_help = true;
        f.help = rest;
      } else {
        if (f.has_type) p.errors.push_back(where + "second TYPE for " + name);
        if (!f.samples.empty()) p.errors.push_back(where + "TYPE after samples of " + name);
        f.has_type = true;
        f.type = rest;
      }
      current = name;
      continue;
    }
    if (line[0] == '#') continue;
    Sample s;
    size_t i = 0;
    while (i < line.size() && line[i] != '{' && line[i] != ' ') ++i;
    s.name = line.substr(0, i);
    std::string err;
    if (i < line.size() && line[i] == '{' && !parse_labels(line, i, s.labels, err)) {
      p.errors.push_back(where + err);
      continue;
    }
    if (i >= line.size() || line[i] != ' ') {
      p.errors.push_back(where + "no value");
      continue;
    }
    bool ok = false;
    s.value = parse_value(line.substr(i + 1), ok);
    if (!ok) {
      p.errors.push_back(where + "bad value");
      continue;
    }
    auto it = p.families.find(current);
    bool belongs = it != p.families.end() && s.name == current;
    if (it != p.families.end() && it->second.type == "histogram")
      belongs = belongs || s.name == current + "_bucket" || s.name == current + "_sum" ||
                s.name == current + "_count";
    if (!belongs) {
      p.errors.push_back(where + "sample " + s.name + " outside its family");
      continue;
    }
    it->second.samples.push_back(std::move(s));
  }
  return p;
}

std::vector<std::string> check_histograms(const Parsed& p) {
  std::vector<std::string> bad;
  for (const auto& [name, f] : p.families) {
    if (f.type != "histogram") continue;
    struct Series {
      std::vector<std::pair<double, double>> buckets;  // (le, value) in text order
      double sum = NAN, count = NAN;
    };
    std::map<std::map<std::string, std::string>, Series> series;
    for (const Sample& s : f.samples) {
      auto labels = s.labels;
      if (s.name == name + "_bucket") {
        auto le = labels.find("le");
        if (le == labels.end()) {
          bad.push_back(name + ": bucket without le");
          continue;
        }
        const double bound =
            le->second == "+Inf" ? INFINITY : std::strtod(le->second.c_str(), nullptr);
        labels.erase(le);
        series[labels].buckets.emplace_back(bound, s.value);
      } else if (s.name == name + "_sum") {
        series[labels].sum = s.value;
      } else {
        series[labels].count = s.value;
      }
    }
    for (const auto& [labels, se] : series) {
      if (se.buckets.empty() || !std::isinf(se.buckets.back().first))
        bad.push_back(name + ": last bucket is not +Inf");
      for (size_t i = 1; i < se.buckets.size(); ++i) {
        if (!(se.buckets[i].first > se.buckets[i - 1].first))
          bad.push_back(name + ": le not increasing");
        if (se.buckets[i].second < se.buckets[i - 1].second)
          bad.push_back(name + ": bucket counts decrease");
      }
      if (std::isnan(se.count)) bad.push_back(name + ": no _count");
      if (std::isnan(se.sum)) bad.push_back(name + ": no _sum");
      if (!se.buckets.empty() && se.buckets.back().second != se.count)
        bad.push_back(name + ": +Inf bucket != _count");
    }
  }
  return bad;
}

}  // namespace kvw::obs::test
