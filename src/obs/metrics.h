// obs/metrics.h: Prometheus metric primitives (counter, gauge, histogram), label families and a
// registry that renders the text exposition format 0.0.4.
// Owner: ServingMetrics (or a test). Thread safety: observe/inc/set are lock-free atomics, so the
// engine thread can record every step; Family::with() takes a mutex (cache the returned child
// on hot paths; children live as long as the family); Registry::render() may run concurrently
// with observations (each histogram's buckets are read once, so le="+Inf" always equals _count).
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

namespace kvw::obs {

class Counter {
 public:
  void inc(double v = 1.0) { value_.fetch_add(v, std::memory_order_relaxed); }
  // Mirrors a cumulative count kept elsewhere (EngineStats): never moves backwards.
  void set_total(double v);
  double value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0.0};
};

class Gauge {
 public:
  void set(double v) { value_.store(v, std::memory_order_relaxed); }
  void add(double v) { value_.fetch_add(v, std::memory_order_relaxed); }
  double value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0.0};
};

class Histogram {
 public:
  // `bounds`: the finite upper bounds, strictly increasing (CHECKed); +Inf is implicit.
  explicit Histogram(std::vector<double> bounds);
  void observe(double v);

  struct Snapshot {
    std::vector<double> bounds;        // finite upper bounds
    std::vector<uint64_t> cumulative;  // [bounds.size() + 1]: count of values <= bound; last = +Inf
    uint64_t count = 0;                // == cumulative.back()
    double sum = 0.0;
  };
  Snapshot snapshot() const;
  const std::vector<double>& bounds() const { return bounds_; }

 private:
  std::vector<double> bounds_;
  std::unique_ptr<std::atomic<uint64_t>[]> buckets_;  // [bounds_.size() + 1], not cumulative
  std::atomic<double> sum_{0.0};
};

// The q-quantile (0..1) by linear interpolation inside the bucket, as PromQL's
// histogram_quantile does; NaN when the snapshot is empty. Values in +Inf report the last bound.
double histogram_quantile(double q, const Histogram::Snapshot& s);

enum class MetricType { kCounter, kGauge, kHistogram };

class FamilyBase {
 public:
  FamilyBase(std::string name, std::string help, MetricType type,
             std::vector<std::string> label_names);
  virtual ~FamilyBase() = default;
  const std::string& name() const { return name_; }
  MetricType type() const { return type_; }
  // Appends HELP, TYPE and one line per sample (children in label-value order).
  void render(std::string& out) const;

 protected:
  virtual void render_children(std::string& out) const = 0;
  std::string label_block(const std::vector<std::string>& values, std::string_view extra_name = {},
                          std::string_view extra_value = {}) const;

  const std::string name_, help_;
  const MetricType type_;
  const std::vector<std::string> label_names_;
  mutable std::mutex mu_;  // guards the children maps
};

template <typename T>
class Family : public FamilyBase {
 public:
  using FamilyBase::FamilyBase;
  // The child for these label values (created on first use); values.size() must equal the
  // number of label names (CHECKed). The reference stays valid for the family's lifetime.
  T& with(const std::vector<std::string>& values);

 protected:
  void render_children(std::string& out) const override;
  virtual std::unique_ptr<T> make() const {
    if constexpr (std::is_default_constructible_v<T>)
      return std::make_unique<T>();
    else
      return nullptr;  // HistogramFamily overrides
  }

  std::map<std::vector<std::string>, std::unique_ptr<T>> children_;
};

class HistogramFamily : public Family<Histogram> {
 public:
  HistogramFamily(std::string name, std::string help, std::vector<std::string> label_names,
                  std::vector<double> bounds);

 protected:
  void render_children(std::string& out) const override;
  std::unique_ptr<Histogram> make() const override { return std::make_unique<Histogram>(bounds_); }

 private:
  std::vector<double> bounds_;
};

// Owns families in registration order; names must be unique (CHECKed).
class Registry {
 public:
  Family<Counter>& counter(std::string name, std::string help,
                           std::vector<std::string> label_names = {});
  Family<Gauge>& gauge(std::string name, std::string help,
                       std::vector<std::string> label_names = {});
  HistogramFamily& histogram(std::string name, std::string help, std::vector<double> bounds,
                             std::vector<std::string> label_names = {});
  std::string render() const;

 private:
  template <typename F>
  F& add(std::unique_ptr<F> f);

  mutable std::mutex mu_;
  std::vector<std::unique_ptr<FamilyBase>> families_;
};

// Text-format helpers (exposed for tests): label values escape \ " and newline; HELP text
// escapes \ and newline; numbers print as integers when integral, else %.17g, and +Inf/-Inf/NaN.
std::string escape_label_value(std::string_view v);
std::string escape_help(std::string_view v);
std::string format_value(double v);

}  // namespace kvw::obs
