#include "cli/client.h"

#include <httplib.h>
#include <sys/stat.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace meridian::cli {

using base::Status;

std::string DefaultConfigPath() {
  if (const char* p = std::getenv("MERIDIAN_CONFIG"); p && *p) return p;
  const char* home = std::getenv("HOME");
  return std::string(home && *home ? home : ".") + "/.config/meridian/config.json";
}

base::Result<ClientConfig> LoadConfig(const std::string& path) {
  ClientConfig c;
  std::ifstream in(path);
  if (!in) return c;
  std::stringstream text;
  text << in.rdbuf();
  Json j = Json::parse(text.str(), nullptr, false);
  if (j.is_discarded() || !j.is_object()) {
    return Status::Invalid(path + ": not a Meridian client configuration (JSON object)");
  }
  c.server = j.value("server", "");
  c.token = j.value("token", "");
  c.ca_cert = j.value("caCert", "");
  c.insecure = j.value("insecureSkipVerify", false);
  return c;
}

Status SaveConfig(const std::string& path, const ClientConfig& c) {
  std::error_code ec;
  std::filesystem::create_directories(std::filesystem::path(path).parent_path(), ec);
  Json j = {{"server", c.server}, {"token", c.token}};
  if (!c.ca_cert.empty()) j["caCert"] = c.ca_cert;
  if (c.insecure) j["insecureSkipVerify"] = true;
  {
    std::ofstream out(path, std::ios::trunc);
    if (!out) return Status::Io("cannot write " + path);
    chmod(path.c_str(), 0600);
    out << j.dump(2) << "\n";
    if (!out) return Status::Io("cannot write " + path);
  }
  return Status::Ok();
}

ClientConfig ResolveConfig(const ClientConfig& flags, const ClientConfig& file) {
  auto pick = [](const std::string& flag, const char* env, const std::string& from_file) {
    if (!flag.empty()) return flag;
    if (const char* v = std::getenv(env); v && *v) return std::string(v);
    return from_file;
  };
  ClientConfig c;
  c.server = pick(flags.server, "MERIDIAN_SERVER", file.server);
  c.token = pick(flags.token, "MERIDIAN_TOKEN", file.token);
  c.ca_cert = pick(flags.ca_cert, "MERIDIAN_CA_CERT", file.ca_cert);
  c.insecure = flags.insecure || file.insecure;
  return c;
}

base::Result<Response> Client::Call(const std::string& method, const std::string& path,
                                    const Json* body) const {
  auto r = Raw(method, path, body ? body->dump() : "", "application/json");
  if (!r.ok()) return r.status();
  Response out;
  out.status = r->status;
  if (!r->body.empty()) {
    out.body = Json::parse(r->body, nullptr, false);
    if (out.body.is_discarded()) out.body = Json{{"text", r->body}};
  }
  return out;
}

base::Result<RawResponse> Client::Raw(const std::string& method, const std::string& path,
                                      const std::string& payload, const char* content_type) const {
  if (config_.server.empty()) {
    return Status::Invalid(
        "no server: pass --server, set MERIDIAN_SERVER, or run `meridian login --server URL`");
  }
  if (config_.server.rfind("http://", 0) != 0 && config_.server.rfind("https://", 0) != 0) {
    return Status::Invalid("server \"" + config_.server + "\" must start with http:// or https://");
  }
  httplib::Client http(config_.server);
  http.set_connection_timeout(5);
  http.set_tcp_nodelay(true);
  http.set_read_timeout(60);
  if (!config_.token.empty()) http.set_bearer_token_auth(config_.token);
  if (!config_.ca_cert.empty()) http.set_ca_cert_path(config_.ca_cert.c_str());
  http.enable_server_certificate_verification(!config_.insecure);
  httplib::Result r = method == "GET"      ? http.Get(path)
                      : method == "DELETE" ? http.Delete(path)
                      : method == "PUT"    ? http.Put(path, payload, content_type)
                                           : http.Post(path, payload, content_type);
  if (!r) {
    const httplib::Error e = r.error();
    std::string why;
    switch (e) {
      case httplib::Error::Connection:
        why = "connection refused or host unreachable (is `meridian server` running there?)";
        break;
      case httplib::Error::ConnectionTimeout:
        why = "timed out connecting";
        break;
      case httplib::Error::SSLServerVerification:
        why = "TLS: the server's certificate is not trusted (pass --ca-cert FILE)";
        break;
      case httplib::Error::SSLConnection:
        why = "TLS handshake failed (is the server serving HTTPS on this port?)";
        break;
      case httplib::Error::SSLLoadingCerts:
        why = "TLS: cannot load the CA certificate " + config_.ca_cert;
        break;
      default:
        why = httplib::to_string(e);
    }
    return Status(base::StatusCode::kIoError, "cannot reach " + config_.server + ": " + why);
  }
  RawResponse out;
  out.status = r->status;
  out.body = std::move(r->body);
  for (const auto& [k, v] : r->headers) out.headers[k] = v;
  return out;
}

int ExitCodeFor(int status) {
  if (status < 300) return kExitOk;
  if (status == 400 || status == 413) return kExitUsage;
  if (status == 401 || status == 403) return kExitAuth;
  if (status == 404) return kExitNotFound;
  if (status == 409 || status == 422) return kExitConflict;
  return kExitError;
}

std::string ErrorMessage(const Response& r) {
  if (r.body.is_object() && r.body.contains("error")) {
    const Json& e = r.body.at("error");
    std::string msg = e.value("message", "request failed");
    if (e.contains("details") && e.at("details").size() > 1) {
      msg.clear();
      for (const Json& d : e.at("details")) {
        std::string where = d.value("file", "");
        if (d.contains("line")) {
          where += (where.empty() ? "" : ":") + std::to_string(d.value("line", 0)) + ":" +
                   std::to_string(d.value("column", 0));
        }
        msg += (msg.empty() ? "" : "\n") + (where.empty() ? "" : where + ": ") +
               d.value("field", "") + ": " + d.value("message", "");
      }
    }
    if (r.status == 401) msg += " (run `meridian login`, or set MERIDIAN_TOKEN)";
    return msg;
  }
  return "HTTP " + std::to_string(r.status);
}

}  // namespace meridian::cli
