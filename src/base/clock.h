#pragma once

#include <chrono>

namespace meridian::base {

// The real wall clock, in seconds since the Unix epoch, for code that is not handed a Clock (the
// agent's loop, the task shim).
inline double WallClockNow() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// Wall-clock time in seconds since the Unix epoch. Services get a Clock injected; only
// SystemClock reads the real one, so tests can drive time themselves.
class Clock {
 public:
  virtual ~Clock() = default;
  virtual double Now() const = 0;
};

class SystemClock final : public Clock {
 public:
  double Now() const override { return WallClockNow(); }
};

// A clock that moves only when told to. Thread-compatible: set it before sharing.
class FakeClock final : public Clock {
 public:
  explicit FakeClock(double now = 1.7e9) : now_(now) {}
  double Now() const override { return now_; }
  void Advance(double seconds) { now_ += seconds; }

 private:
  double now_;
};

}  // namespace meridian::base
