#include "api/job_mentions.h"

#include <regex>

namespace meridian::api {

namespace {

const std::regex& JobId() {
  static const std::regex kJobId(R"(\bjob (\d{1,18})\b)");
  return kJobId;
}

bool Textual(const std::string& key) {
  return key == "reason" || key == "message" || key == "quota";
}

}  // namespace

void JobMentions::CollectText(const std::string& text) {
  if (text.find("job ") == std::string::npos) return;
  for (std::sregex_iterator it(text.begin(), text.end(), JobId()), end; it != end; ++it) {
    const int64_t id = std::stoll((*it)[1].str());
    if (!hidden_.count(id)) pending_[id] = true;
  }
}

void JobMentions::Collect(const Json& json) {
  if (json.is_array()) {
    for (const Json& v : json) Collect(v);
  } else if (json.is_object()) {
    for (const auto& [k, v] : json.items()) {
      if (v.is_string() && Textual(k)) CollectText(v.get<std::string>());
      if (k == "stop" && v.is_object() && v.contains("for") && v.at("for").is_number_integer()) {
        const int64_t id = v.at("for").get<int64_t>();
        if (!hidden_.count(id)) pending_[id] = true;
      }
      if (v.is_structured()) Collect(v);
    }
  }
}

void JobMentions::Resolve() {
  if (pending_.empty()) return;
  std::map<int64_t, std::string> projects;
  base::Status s = store_->Read([&](store::Tx& tx) {
    for (const auto& [id, unused] : pending_) {
      auto job = tx.GetJob(id);
      if (job.ok()) projects[id] = job->project;
    }
    return base::Status::Ok();
  });
  // A job that cannot be read (gone, or the store failed) is hidden: nothing tells that it is
  // the caller's.
  for (const auto& [id, unused] : pending_) {
    auto it = projects.find(id);
    hidden_[id] = !s.ok() || it == projects.end() || !access_.CanRead(it->second);
  }
  pending_.clear();
}

bool JobMentions::Hidden(int64_t id) const {
  auto it = hidden_.find(id);
  return it == hidden_.end() || it->second;
}

std::string JobMentions::Hide(const std::string& text) {
  if (access_.IsAdmin() || text.find("job ") == std::string::npos) return text;
  CollectText(text);
  Resolve();
  std::string out;
  auto last = text.cbegin();
  for (std::sregex_iterator it(text.begin(), text.end(), JobId()), end; it != end; ++it) {
    out.append(last, text.cbegin() + it->position());
    const int64_t id = std::stoll((*it)[1].str());
    out += Hidden(id) ? "a job in another project" : it->str();
    last = text.cbegin() + it->position() + it->length();
  }
  out.append(last, text.cend());
  // The controller's words for a preemption by priority: "preempted for job N (priority)".
  const std::string by_priority = "preempted for a job in another project (priority)";
  for (size_t at = out.find(by_priority); at != std::string::npos; at = out.find(by_priority)) {
    out.replace(at, by_priority.size(), "preempted for a higher-priority job in another project");
  }
  return out;
}

void JobMentions::Rewrite(Json* json) {
  if (json->is_array()) {
    for (Json& v : *json) Rewrite(&v);
    return;
  }
  if (!json->is_object()) return;
  for (auto& [k, v] : json->items()) {
    if (v.is_string() && Textual(k)) v = Hide(v.get<std::string>());
    if (k == "stop" && v.is_object() && v.contains("for") && v.at("for").is_number_integer() &&
        Hidden(v.at("for").get<int64_t>())) {
      v.erase("for");
    }
    if (v.is_structured()) Rewrite(&v);
  }
}

void JobMentions::Hide(Json* json) {
  if (access_.IsAdmin()) return;
  Collect(*json);
  Resolve();
  Rewrite(json);
}

}  // namespace meridian::api
