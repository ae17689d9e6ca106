#pragma once

#include <optional>
#include <string>
#include <utility>
#include <variant>

namespace meridian::base {

enum class StatusCode {
  kOk,
  kInvalidArgument,  // the caller's input is wrong; the message says what and where
  kNotFound,
  kFailedPrecondition,
  kIoError,
  kInternal,
  kAlreadyExists,
  kConflict,          // optimistic concurrency: the resource changed since it was read
  kUnauthenticated,   // no credentials, or credentials that are not valid
  kPermissionDenied,  // valid credentials that may not do this
  kUnavailable,       // not now (starting, overloaded): try again
};

// The result of an operation that can fail. Across module boundaries errors travel as values,
// never as exceptions; a scheduling outcome such as "does not fit" is not an error at all.
class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status Ok() { return Status(); }
  static Status Invalid(std::string message) {
    return Status(StatusCode::kInvalidArgument, std::move(message));
  }
  static Status NotFound(std::string message) {
    return Status(StatusCode::kNotFound, std::move(message));
  }
  static Status Io(std::string message) { return Status(StatusCode::kIoError, std::move(message)); }
  static Status Conflict(std::string message) {
    return Status(StatusCode::kConflict, std::move(message));
  }
  static Status Exists(std::string message) {
    return Status(StatusCode::kAlreadyExists, std::move(message));
  }
  static Status Internal(std::string message) {
    return Status(StatusCode::kInternal, std::move(message));
  }

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

// A value or the Status that explains why there is none.
template <class T>
class [[nodiscard]] Result {
 public:
  Result(T value) : state_(std::move(value)) {}         // NOLINT: implicit by design
  Result(Status status) : state_(std::move(status)) {}  // NOLINT: implicit by design

  bool ok() const { return std::holds_alternative<T>(state_); }
  const Status& status() const {
    static const Status kOk;
    return ok() ? kOk : std::get<Status>(state_);
  }
  T& value() & { return std::get<T>(state_); }
  const T& value() const& { return std::get<T>(state_); }
  T&& value() && { return std::get<T>(std::move(state_)); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }

 private:
  std::variant<T, Status> state_;
};

}  // namespace meridian::base
