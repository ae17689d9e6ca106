#pragma once

// What the end-to-end tests of servers on PostgreSQL share: SQL run straight on the test's
// database, and a small estate to apply.
#include <libpq-fe.h>

#include <string>

namespace meridian::testing {

// The first value of `sql` on `conninfo`, or "".
inline std::string Sql(const std::string& conninfo, const std::string& sql) {
  PGconn* c = PQconnectdb(conninfo.c_str());
  PGresult* r = PQexec(c, sql.c_str());
  std::string first =
      PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) > 0 ? PQgetvalue(r, 0, 0) : "";
  PQclear(r);
  PQfinish(c);
  return first;
}

// Runs `sql` (no rows back) on `conninfo`; "" when it succeeded, else why not.
inline std::string SqlExec(const std::string& conninfo, const std::string& sql) {
  PGconn* c = PQconnectdb(conninfo.c_str());
  std::string error;
  if (PQstatus(c) != CONNECTION_OK) {
    error = PQerrorMessage(c);
  } else {
    PGresult* r = PQexec(c, sql.c_str());
    if (PQresultStatus(r) != PGRES_COMMAND_OK) error = PQresultErrorMessage(r);
    PQclear(r);
  }
  PQfinish(c);
  return error;
}

// One project, and one declared node of 8 H100s, on which jobs are placed (and no agent runs
// them).
inline const char* kOneNodeEstate = R"(kind: Organization
metadata: {name: acme}
---
kind: Team
metadata: {name: lab}
spec: {organization: acme}
---
kind: Project
metadata: {name: research}
spec: {team: lab}
---
kind: Cluster
metadata: {name: onprem}
spec: {type: on-prem}
---
kind: NodePool
metadata: {name: h100}
spec: {cluster: onprem, nodes: 1, gpusPerNode: 8, gpuModel: H100-80GB}
)";

}  // namespace meridian::testing
