// The web dashboard's files, served from memory.
#include "api/dashboard.h"

#include "api/auth.h"
#include "net/http_server.h"

namespace meridian::api {

namespace {

std::string ContentType(const std::string& path) {
  auto ends = [&](const char* ext) {
    const std::string e = ext;
    return path.size() >= e.size() && path.compare(path.size() - e.size(), e.size(), e) == 0;
  };
  if (ends(".html")) return "text/html; charset=utf-8";
  if (ends(".js")) return "text/javascript; charset=utf-8";
  if (ends(".css")) return "text/css; charset=utf-8";
  if (ends(".svg")) return "image/svg+xml";
  if (ends(".png")) return "image/png";
  return "application/octet-stream";
}

}  // namespace

void ServeDashboard(net::HttpServer& server, const std::vector<WebAsset>& assets) {
  for (const WebAsset& asset : assets) {
    std::string body(reinterpret_cast<const char*>(asset.data), asset.size);
    const std::string etag = "\"" + Sha256Hex(body).substr(0, 32) + "\"";
    const std::string type = ContentType(asset.path);
    auto handler = [body, etag, type](const net::Request& req, net::Response& res) {
      res.set_header("ETag", etag);
      res.set_header("Cache-Control", "no-cache");
      res.set_header("X-Content-Type-Options", "nosniff");
      if (type.rfind("text/html", 0) == 0) {
        // Scripts and styles from this origin only, nothing inline; the page may not be framed.
        res.set_header("Content-Security-Policy", "default-src 'self'; frame-ancestors 'none'");
      }
      if (req.get_header_value("If-None-Match") == etag) {
        res.status = 304;
        return;
      }
      res.set_content(body, type);
    };
    server.Handle("GET", asset.path, handler);
    if (std::string(asset.path) == "/index.html") server.Handle("GET", "/", handler);
  }
}

}  // namespace meridian::api
