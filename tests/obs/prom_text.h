// tests/obs/prom_text.h: a strict parser of the Prometheus text format 0.0.4 for our tests, so
// invariants are checked on what a scraper would read, not on our in-memory values.
#pragma once

#include <map>
#include <string>
#include <vector>

namespace kvw::obs::test {

struct Sample {
  std::string name;  // as written (with _bucket/_sum/_count)
  std::map<std::string, std::string> labels;
  double value = 0;
};

struct ParsedFamily {
  std::string help, type;
  bool has_help = false, has_type = false;
  std::vector<Sample> samples;
};

struct Parsed {
  std::map<std::string, ParsedFamily> families;
  std::vector<std::string> errors;  // syntax errors, samples without a declared family
};

// Parses `text`; a sample belongs to the family declared by the nearest preceding TYPE line
// (its name, or name + _bucket/_sum/_count for histograms).
Parsed parse_prometheus_text(const std::string& text);

// Histogram invariants per label set (without le): buckets cumulative and non-decreasing with
// increasing le, last le="+Inf", +Inf == _count, _sum present (and >= 0 when values are >= 0).
// Returns the violations.
std::vector<std::string> check_histograms(const Parsed& p);

}  // namespace kvw::obs::test
