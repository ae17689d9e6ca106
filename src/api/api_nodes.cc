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

namespace {

// The GPU index of /nodes/{node}/gpus/{index}/...: digits (the route's), within a node's range.
std::optional<int32_t> GpuArg(Api::Call& call) {
  const std::string text = call.Arg(2);
  if (text.empty() || text.size() > 4) {
    Fail(call, 400, "invalid_argument", "gpu index: \"" + text + "\" is not 0..1023", "index");
    return std::nullopt;
  }
  const int value = std::stoi(text);
  if (value > 1023) {
    Fail(call, 400, "invalid_argument", "gpu index: " + text + " is not 0..1023", "index");
    return std::nullopt;
  }
  return value;
}

}  // namespace

void Api::InjectGpuFault(Call& call) {
  if (!node_ops_) return Fail(call, 404, "not_found", "this server has no registered nodes");
  if (!MayOperateNodes(call, "inject faults into")) return;
  const std::optional<int32_t> gpu = GpuArg(call);
  if (!gpu) return;
  std::optional<Json> body = JsonBody(call);
  if (!body) return;
  auto fault = domain::DecodeFaultInjection(*body);
  if (!fault.ok()) return Fail(call, fault.status());
  const std::string node = call.Arg(1);
  auto injected = node_ops_->InjectFault(node, call.access.user(), *gpu, *fault);
  if (!injected.ok()) return Fail(call, injected.status());
  call.audit_message =
      "fault injected: " +
      (fault->warning.empty() ? domain::DescribeXid(fault->xid) : "warning " + fault->warning) +
      " on GPU " + std::to_string(*gpu) + " of node " + node;
  hooks_->Wake();
  Respond(call, 202, *injected);
}

void Api::UncordonGpu(Call& call) {
  if (!node_ops_) return Fail(call, 404, "not_found", "this server has no registered nodes");
  if (!MayOperateNodes(call, "uncordon GPUs of")) return;
  const std::optional<int32_t> gpu = GpuArg(call);
  if (!gpu) return;
  const std::string node = call.Arg(1);
  auto state = node_ops_->UncordonGpu(node, call.access.user(), *gpu);
  if (!state.ok()) return Fail(call, state.status());
  call.audit_message = "GPU " + std::to_string(*gpu) + " of node " + node + " uncordoned";
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
