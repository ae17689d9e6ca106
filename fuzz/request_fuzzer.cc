// libFuzzer target: what the API decodes from a request before anything is stored: the JSON
// body of a job submission, a user's roles, a bearer token, and the agent protocol (registration,
// heartbeats and their answers, the shim's files).
#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "api/auth.h"
#include "api/json_body.h"
#include "domain/documents.h"
#include "protocol/agent_protocol.h"

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
  // What agents and shims send: every decoder of the protocol.
  (void)meridian::protocol::DecodeRegistration(body);
  (void)meridian::protocol::DecodeHeartbeat(body);
  (void)meridian::protocol::DecodeAssignments(body);
  (void)meridian::protocol::DecodeAssignment(body);
  (void)meridian::protocol::DecodeTerms(body);
  (void)meridian::protocol::DecodeShimSpec(body);
  (void)meridian::protocol::DecodeShimExit(body);
  if (body.is_object() && body.contains("devices")) {
    (void)meridian::protocol::DecodeDevices(body.at("devices"));
  }
  return 0;
}
