#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace meridian::net {
class HttpServer;
}  // namespace meridian::net

namespace meridian::api {

// One file of the dashboard's build (web/), embedded in the binary.
struct WebAsset {
  const char* path;  // "/index.html", "/app.js", ...
  const unsigned char* data;
  size_t size;
};

// The dashboard's files, generated at build time from web/ (cmake/embed_assets.cmake).
const std::vector<WebAsset>& DashboardAssets();

// Serves the dashboard at / (index.html) and its files at their paths, with ETags so that a
// browser revalidates rather than downloads them again. The dashboard itself only calls the
// public API.
void ServeDashboard(net::HttpServer& server, const std::vector<WebAsset>& assets);

}  // namespace meridian::api
