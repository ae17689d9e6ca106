// libFuzzer target: what the API decodes from a request before anything is stored: the JSON
// body of a job submission, a user's roles, a bearer token, an agent's registration and task
// reports.
#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "api/api.h"
#include "api/auth.h"
#include "domain/documents.h"
#include "server/nodes.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  std::string id, secret;
  (void)meridian::api::ParseToken(text, &id, &secret);
  auto decoded = meridian::api::DecodeJsonBody(text);
  if (!decoded.ok()) return 0;
  const nlohmann::json& body = *decoded;
  meridian::domain::SourceDoc src{body, "", {}};
  meridian::domain::ErrorList errors;
  (void)meridian::domain::ValidateJobDocument(src, &errors);
  (void)meridian::domain::ValidateDocument(src, &errors);
  (void)errors.ToString();
  auto roles =
      meridian::api::ParseRoles(body.is_object() && body.contains("spec") ? body.at("spec") : body);
  if (roles.ok()) (void)meridian::api::RolesToJson(*roles);
  (void)meridian::server::NodeFromRegistration(body);
  if (body.is_object() && body.contains("tasks")) {
    (void)meridian::server::ParseTaskReports(body.at("tasks"));
  }
  return 0;
}
