// Operators' node operations: cordon, uncordon, drain and delete of a registered node.
#include "api/api_internal.h"

namespace meridian::api {

namespace {

// Nodes belong to clusters, which no role below admin is scoped to (auth.h): admins only.
bool MayOperateNodes(Api::Call& call, const std::string& what) {
  if (call.access.IsAdmin()) return true;
  Fail(call, 403, "permission_denied",
       call.access.user() + " may not " + what + " nodes (admins only)");
  return false;
}

}  // namespace

void Api::CordonNode(Call& call, bool cordoned) {
  if (!node_ops_) return Fail(call, 404, "not_found", "this server has no registered nodes");
  if (!MayOperateNodes(call, cordoned ? "cordon" : "uncordon")) return;
  const std::string node = call.Arg(1);
  auto state = node_ops_->Cordon(node, call.access.user(), cordoned);
  if (!state.ok()) return Fail(call, state.status());
  call.audit_message = "node " + node + (cordoned ? " cordoned" : " uncordoned");
  hooks_->Wake();
  Respond(call, 200, *state);
}

void Api::DrainNode(Call& call) {
  if (!node_ops_) return Fail(call, 404, "not_found", "this server has no registered nodes");
  if (!MayOperateNodes(call, "drain")) return;
  std::optional<Json> body = Json();
  if (!call.req.body.empty()) body = JsonBody(call);
  if (!body) return;
  auto request = domain::DecodeDrainRequest(*body);
  if (!request.ok()) return Fail(call, request.status());
  const std::string node = call.Arg(1);
  auto state = node_ops_->Drain(node, call.access.user(), *request);
  if (!state.ok()) return Fail(call, state.status());
  call.audit_message =
      "node " + node +
      " drained: " + std::to_string(state->value("stopping", Json::array()).size()) +
      " job(s) asked to stop" + (request->reason.empty() ? "" : " (" + request->reason + ")");
  hooks_->Wake();
  Respond(call, 200, *state);
}

void Api::DeleteNode(Call& call) {
  if (!node_ops_) return Fail(call, 404, "not_found", "this server has no registered nodes");
  if (!MayOperateNodes(call, "delete")) return;
  const std::string force = call.req.get_param_value("force");
  if (!force.empty() && force != "true" && force != "false") {
    return Fail(call, 400, "invalid_argument",
                "force: \"" + force + "\" is neither \"true\" nor \"false\"", "force");
  }
  const std::string node = call.Arg(1);
  auto deleted = node_ops_->Delete(node, call.access.user(), force == "true");
  if (!deleted.ok()) return Fail(call, deleted.status());
  call.audit_message = "node " + node + " deleted" + (force == "true" ? " (forced)" : "");
  hooks_->Wake();
  Respond(call, 200, *deleted);
}

}  // namespace meridian::api
