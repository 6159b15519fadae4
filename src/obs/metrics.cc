#include "obs/metrics.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>

#include "core/check.h"

namespace kvw::obs {

void Counter::set_total(double v) {
  double cur = value_.load(std::memory_order_relaxed);
  while (v > cur && !value_.compare_exchange_weak(cur, v, std::memory_order_relaxed)) {
  }
}

Histogram::Histogram(std::vector<double> bounds)
    : bounds_(std::move(bounds)),
      buckets_(std::make_unique<std::atomic<uint64_t>[]>(bounds_.size() + 1)) {
  for (size_t i = 1; i < bounds_.size(); ++i)
    CHECK(bounds_[i] > bounds_[i - 1]) << "histogram bounds must increase";
  for (size_t i = 0; i <= bounds_.size(); ++i) buckets_[i].store(0, std::memory_order_relaxed);
}

void Histogram::observe(double v) {
  // Binary search: 20-ish bounds, ~5 comparisons; cheaper than the atomics around it.
  const size_t i = std::lower_bound(bounds_.begin(), bounds_.end(), v) - bounds_.begin();
  buckets_[i].fetch_add(1, std::memory_order_relaxed);
  sum_.fetch_add(v, std::memory_order_relaxed);
}

Histogram::Snapshot Histogram::snapshot() const {
  Snapshot s;
  s.bounds = bounds_;
  s.cumulative.resize(bounds_.size() + 1);
  uint64_t acc = 0;
  for (size_t i = 0; i <= bounds_.size(); ++i) {
    acc += buckets_[i].load(std::memory_order_relaxed);
    s.cumulative[i] = acc;
  }
  s.count = acc;
  s.sum = sum_.load(std::memory_order_relaxed);
  return s;
}

double histogram_quantile(double q, const Histogram::Snapshot& s) {
  if (s.count == 0) return std::numeric_limits<double>::quiet_NaN();
  const double rank = std::clamp(q, 0.0, 1.0) * double(s.count);
  for (size_t i = 0; i < s.cumulative.size(); ++i) {
    if (double(s.cumulative[i]) < rank) continue;
    if (i == s.bounds.size()) return s.bounds.empty() ? 0.0 : s.bounds.back();
    const double lo = i == 0 ? 0.0 : s.bounds[i - 1];
    const double below = i == 0 ? 0.0 : double(s.cumulative[i - 1]);
    const double in_bucket = double(s.cumulative[i]) - below;
    if (in_bucket <= 0) return s.bounds[i];
    return lo + (s.bounds[i] - lo) * (rank - below) / in_bucket;
  }
  return s.bounds.empty() ? 0.0 : s.bounds.back();
}

std::string escape_label_value(std::string_view v) {
  std::string out;
  out.reserve(v.size());
  for (char c : v) {
    if (c == '\\')
      out += "\\\\";
    else if (c == '"')
      out += "\\\"";
    else if (c == '\n')
      out += "\\n";
    else
      out += c;
  }
  return out;
}

std::string escape_help(std::string_view v) {
  std::string out;
  for (char c : v) {
    if (c == '\\')
      out += "\\\\";
    else if (c == '\n')
      out += "\\n";
    else
      out += c;
  }
  return out;
}

std::string format_value(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  char buf[40];
  if (v == std::floor(v) && std::fabs(v) < 1e15)
    std::snprintf(buf, sizeof buf, "%.0f", v);
  else  // shortest form that reads back exactly: 0.1, not 0.10000000000000001
    for (int precision = 6; precision <= 17; ++precision) {
      std::snprintf(buf, sizeof buf, "%.*g", precision, v);
      if (std::strtod(buf, nullptr) == v) break;
    }
  return buf;
}

FamilyBase::FamilyBase(std::string name, std::string help, MetricType type,
                       std::vector<std::string> label_names)
    : name_(std::move(name)),
      help_(std::move(help)),
      type_(type),
      label_names_(std::move(label_names)) {}

void FamilyBase::render(std::string& out) const {
  static constexpr const char* kTypes[] = {"counter", "gauge", "histogram"};
  out += "# HELP " + name_ + " " + escape_help(help_) + "\n";
  out += "# TYPE " + name_ + " " + kTypes[int(type_)] + "\n";
  render_children(out);
}

std::string FamilyBase::label_block(const std::vector<std::string>& values,
                                    std::string_view extra_name,
                                    std::string_view extra_value) const {
  if (values.empty() && extra_name.empty()) return {};
  std::string s = "{";
  for (size_t i = 0; i < values.size(); ++i) {
    if (i) s += ',';
    s += label_names_[i] + "=\"" + escape_label_value(values[i]) + "\"";
  }
  if (!extra_name.empty()) {
    if (!values.empty()) s += ',';
    s += std::string(extra_name) + "=\"" + std::string(extra_value) + "\"";
  }
  return s + "}";
}

template <typename T>
T& Family<T>::with(const std::vector<std::string>& values) {
  CHECK(values.size() == label_names_.size()) << name_ << ": wrong number of label values";
  std::lock_guard<std::mutex> lock(mu_);
  auto& slot = children_[values];
  if (!slot) slot = make();
  return *slot;
}

template <typename T>
void Family<T>::render_children(std::string& out) const {
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& [values, child] : children_)
    out += name_ + label_block(values) + " " + format_value(child->value()) + "\n";
}

template <>
void Family<Histogram>::render_children(std::string&) const {}

template class Family<Counter>;
template class Family<Gauge>;
template class Family<Histogram>;

HistogramFamily::HistogramFamily(std::string name, std::string help,
                                 std::vector<std::string> label_names, std::vector<double> bounds)
    : Family<Histogram>(std::move(name), std::move(help), MetricType::kHistogram,
                        std::move(label_names)),
      bounds_(std::move(bounds)) {}

void HistogramFamily::render_children(std::string& out) const {
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& [values, child] : children_) {
    const Histogram::Snapshot s = child->snapshot();
    for (size_t i = 0; i <= s.bounds.size(); ++i) {
      const std::string le = i < s.bounds.size() ? format_value(s.bounds[i]) : "+Inf";
      out += name_ + "_bucket" + label_block(values, "le", le) + " " +
             format_value(double(s.cumulative[i])) + "\n";
    }
    out += name_ + "_sum" + label_block(values) + " " + format_value(s.sum) + "\n";
    out += name_ + "_count" + label_block(values) + " " + format_value(double(s.count)) + "\n";
  }
}

template <typename F>
F& Registry::add(std::unique_ptr<F> f) {
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& g : families_) CHECK(g->name() != f->name()) << "duplicate metric " << f->name();
  F& ref = *f;
  families_.push_back(std::move(f));
  return ref;
}

Family<Counter>& Registry::counter(std::string name, std::string help,
                                   std::vector<std::string> label_names) {
  return add(std::make_unique<Family<Counter>>(std::move(name), std::move(help),
                                               MetricType::kCounter, std::move(label_names)));
}

Family<Gauge>& Registry::gauge(std::string name, std::string help,
                               std::vector<std::string> label_names) {
  return add(std::make_unique<Family<Gauge>>(std::move(name), std::move(help), MetricType::kGauge,
                                             std::move(label_names)));
}

HistogramFamily& Registry::histogram(std::string name, std::string help, std::vector<double> bounds,
                                     std::vector<std::string> label_names) {
  return add(std::make_unique<HistogramFamily>(std::move(name), std::move(help),
                                               std::move(label_names), std::move(bounds)));
}

std::string Registry::render() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::string out;
  out.reserve(16 << 10);
  for (const auto& f : families_) f->render(out);
  return out;
}

}  // namespace kvw::obs
