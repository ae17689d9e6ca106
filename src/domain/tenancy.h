#pragma once

#include <string>

namespace meridian::domain {

// The tenancy and quota tree: Organization > Team > Project. Quotas hang off its nodes (issue 3).
struct Organization {
  std::string name;
};

struct Team {
  std::string name;
  std::string organization;
};

struct Project {
  std::string name;
  std::string team;
};

// A named priority; higher value goes first and may preempt lower values when `preempting`.
struct PriorityClass {
  std::string name;
  int value = 0;
  bool preempting = true;
};

}  // namespace meridian::domain
