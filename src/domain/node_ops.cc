#include "domain/node_ops.h"

#include "domain/spec.h"

namespace meridian::domain {

NodeOps DecodeNodeOps(const Json& spec) {
  NodeOps ops;
  if (!spec.is_object()) return ops;
  if (auto c = spec.find("cordoned"); c != spec.end() && c->is_boolean()) ops.cordoned = *c;
  auto d = spec.find("drain");
  if (d != spec.end() && d->is_object() && d->contains("deadline") &&
      d->at("deadline").is_number()) {
    NodeDrain drain;
    drain.deadline = d->at("deadline").get<double>();
    auto text = [&](const char* key) {
      return d->contains(key) && d->at(key).is_string() ? d->at(key).get<std::string>() : "";
    };
    drain.reason = text("reason");
    drain.by = text("by");
    drain.at = d->contains("at") && d->at("at").is_number() ? d->at("at").get<double>() : 0;
    ops.drain = drain;
    ops.cordoned = true;  // draining implies it, whatever the stored flag says
  }
  if (auto g = spec.find("gpuHealth"); g != spec.end()) ops.gpus = GpuHealthOf(*g);
  return ops;
}

void EncodeNodeOps(const NodeOps& ops, Json* spec) {
  if (!spec->is_object()) *spec = Json::object();
  if (ops.cordoned || ops.drain) {
    (*spec)["cordoned"] = true;
  } else {
    spec->erase("cordoned");
  }
  if (ops.drain) {
    (*spec)["drain"] = {{"deadline", ops.drain->deadline},
                        {"reason", ops.drain->reason},
                        {"by", ops.drain->by},
                        {"at", ops.drain->at}};
  } else {
    spec->erase("drain");
  }
  if (ops.gpus.empty()) {
    spec->erase("gpuHealth");
  } else {
    (*spec)["gpuHealth"] = GpuHealthToJson(ops.gpus);
  }
}

bool NodeSchedulable(std::string_view state, const NodeOps& ops) {
  return state == "Ready" && !ops.cordoned && !ops.drain;
}

std::string_view NodeScheduling(const NodeOps& ops, bool jobs_hold_it) {
  if (ops.drain) return jobs_hold_it ? "draining" : "drained";
  return ops.cordoned ? "cordoned" : "";
}

base::Result<DrainRequest> DecodeDrainRequest(const Json& body) {
  if (body.is_null()) return DrainRequest{};
  if (!body.is_object()) return base::Status::Invalid("body: must be a JSON object");
  SourceDoc doc{body, "", {}};
  ErrorList errors;
  Json canonical;
  FieldReader f(doc, body, "", &errors, &canonical);
  DrainRequest r;
  // A week at most: a longer drain is a cordon.
  if (f.Has("deadline")) r.deadline = f.Duration("deadline", 0, 7 * 24 * 3600.0, 0);
  r.reason = f.String("reason", false);
  if (r.reason.size() > 500) f.Error("reason", "must be at most 500 characters");
  f.Finish();
  if (!errors.empty()) return errors.First();
  return r;
}

}  // namespace meridian::domain
