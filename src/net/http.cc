#include "net/http.h"

#include <strings.h>

namespace meridian::net {

bool LessNoCase::operator()(const std::string& a, const std::string& b) const {
  return strcasecmp(a.c_str(), b.c_str()) < 0;
}

std::string Request::get_param_value(const std::string& key) const {
  auto it = params.find(key);
  return it == params.end() ? "" : it->second;
}

std::string Request::get_header_value(const std::string& key) const {
  auto it = headers.find(key);
  return it == headers.end() ? "" : it->second;
}

void Response::set_header(const std::string& key, const std::string& value) {
  headers.emplace(key, value);
}

void Response::set_content(std::string content, const std::string& content_type) {
  body = std::move(content);
  headers.erase("Content-Type");
  headers.emplace("Content-Type", content_type);
}

void Response::set_chunked_content_provider(const std::string& content_type,
                                            std::function<bool(Sink&)> provider) {
  headers.erase("Content-Type");
  headers.emplace("Content-Type", content_type);
  stream = std::move(provider);
}

namespace {

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

}  // namespace

std::string PercentDecode(const std::string& s, bool plus_is_space) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    if (c == '%' && i + 2 < s.size()) {
      const int hi = HexValue(s[i + 1]);
      const int lo = HexValue(s[i + 2]);
      if (hi >= 0 && lo >= 0) {
        out.push_back(static_cast<char>(hi * 16 + lo));
        i += 2;
        continue;
      }
    }
    out.push_back(plus_is_space && c == '+' ? ' ' : c);
  }
  return out;
}

std::multimap<std::string, std::string> ParseQuery(const std::string& query) {
  std::multimap<std::string, std::string> params;
  size_t start = 0;
  while (start <= query.size()) {
    size_t end = query.find('&', start);
    if (end == std::string::npos) end = query.size();
    const std::string pair = query.substr(start, end - start);
    if (!pair.empty()) {
      const size_t eq = pair.find('=');
      const std::string key = PercentDecode(pair.substr(0, eq), true);
      const std::string value =
          eq == std::string::npos ? "" : PercentDecode(pair.substr(eq + 1), true);
      params.emplace(key, value);
    }
    start = end + 1;
  }
  return params;
}

}  // namespace meridian::net
