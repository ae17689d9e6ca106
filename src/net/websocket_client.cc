#include "net/websocket_client.h"

#include <fcntl.h>
#include <openssl/ssl.h>
#include <sys/stat.h>
#include <unistd.h>

// Boost 1.74's asio/awaitable.hpp uses std::exchange without including <utility>: it must
// come first.
// clang-format off
#include <utility>
// clang-format on

#include <array>
#include <boost/asio.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/ssl.hpp>
#include <boost/beast/websocket.hpp>
#include <boost/beast/websocket/ssl.hpp>
#include <chrono>
#include <deque>
#include <list>
#include <map>
#include <optional>

namespace meridian::net {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace websocket = beast::websocket;
using tcp = asio::ip::tcp;

namespace {

std::chrono::steady_clock::duration Seconds(double s) {
  return std::chrono::duration_cast<std::chrono::steady_clock::duration>(
      std::chrono::duration<double>(s));
}

struct Origin {
  bool tls = false;
  std::string host;
  std::string port;
};

std::optional<Origin> ParseOrigin(const std::string& server) {
  Origin o;
  std::string rest;
  if (server.rfind("http://", 0) == 0) {
    rest = server.substr(7);
  } else if (server.rfind("https://", 0) == 0) {
    o.tls = true;
    rest = server.substr(8);
  } else {
    return std::nullopt;
  }
  rest = rest.substr(0, rest.find('/'));
  const size_t colon = rest.rfind(':');
  if (colon == std::string::npos || rest.back() == ']') {
    o.host = rest;
    o.port = o.tls ? "443" : "80";
  } else {
    o.host = rest.substr(0, colon);
    o.port = rest.substr(colon + 1);
  }
  if (o.host.size() > 2 && o.host.front() == '[') o.host = o.host.substr(1, o.host.size() - 2);
  if (o.host.empty()) return std::nullopt;
  return o;
}

// Runs one asynchronous step to its end on `ioc` (the connection's steps before the loop).
template <class Start>
beast::error_code Step(asio::io_context& ioc, Start start) {
  beast::error_code result = asio::error::would_block;
  start([&result](beast::error_code ec) { result = ec; });
  ioc.restart();
  ioc.run();
  return result;
}

// A local descriptor the loop reads or writes: a duplicate of the caller's, given back to
// blocking mode and closed when done (the original shares its file status flags).
struct Local {
  int fd = -1;
  int flags = 0;
  std::unique_ptr<asio::posix::stream_descriptor> stream;  // none: written blocking (a file)
  std::array<char, 16384> buffer{};
  std::deque<std::string> queue;
  bool writing = false;
  bool close_when_written = false;

  ~Local() {
    if (stream) stream->release();  // asio does not close it: the flags go back first
    if (fd >= 0) {
      ::fcntl(fd, F_SETFL, flags);
      ::close(fd);
    }
  }
};

// Messages waiting to be sent past which a file is read no further until they drain.
constexpr size_t kMaxQueued = 16;

template <class Stream>
class Client final : public WebSocketClient {
 public:
  template <class... Args>
  Client(std::shared_ptr<asio::io_context> ioc, std::shared_ptr<asio::ssl::context> tls,
         Args&&... args)
      : ioc_(std::move(ioc)), tls_(std::move(tls)), ws_(std::forward<Args>(args)...) {}
  ~Client() override {
    // Nothing may run on the loop once its descriptors are gone.
    ioc_->stop();
  }

  websocket::stream<Stream>& ws() { return ws_; }

  void Send(std::string message) override {
    if (close_sent_) return;
    out_.push_back(std::move(message));
    if (!writing_) WriteNext();
  }

  void Watch(int fd, std::function<void(std::string_view)> on_data) override {
    auto local = Open(fd);
    if (!local) {
      asio::post(*ioc_, [on_data] { on_data({}); });
      return;
    }
    if (!local->stream) {
      // A regular file cannot be waited on: it is read a chunk at a time on the loop, each
      // while few messages wait to be sent, so that neither memory nor a message grows with it.
      ReadFile(std::shared_ptr<Local>(std::move(local)), std::move(on_data));
      return;
    }
    readers_.push_back(std::move(local));
    ReadFrom(readers_.back().get(), std::move(on_data));
  }

  void WriteTo(int fd, std::string data) override {
    Local* local = Writer(fd);
    if (local == nullptr || data.empty()) return;
    if (!local->stream) {
      for (size_t done = 0; done < data.size();) {
        const ssize_t n = ::write(local->fd, data.data() + done, data.size() - done);
        if (n <= 0) return;
        done += static_cast<size_t>(n);
      }
      return;
    }
    local->queue.push_back(std::move(data));
    if (!local->writing) WriteLocal(local);
  }

  void CloseWhenWritten(int fd) override {
    auto it = writers_.find(fd);
    if (it == writers_.end()) return;
    it->second->close_when_written = true;
    if (!it->second->writing) writers_.erase(it);
  }

  void After(double seconds, std::function<void()> fn) override {
    auto timer = std::make_shared<asio::steady_timer>(*ioc_, Seconds(seconds));
    timer->async_wait([timer, fn = std::move(fn)](beast::error_code ec) {
      if (!ec) fn();
    });
  }

  void Close() override {
    closing_ = true;
    if (!writing_) SendClose();
  }

  std::string Run(std::function<void(std::string_view)> on_message) override {
    on_message_ = std::move(on_message);
    ReadNext();
    ioc_->restart();
    ioc_->run();
    return reason_;
  }

 private:
  std::unique_ptr<Local> Open(int fd) {
    auto local = std::make_unique<Local>();
    local->fd = ::dup(fd);
    if (local->fd < 0) return nullptr;
    local->flags = ::fcntl(local->fd, F_GETFL);
    struct stat st {};
    if (::fstat(local->fd, &st) == 0 && S_ISREG(st.st_mode)) return local;
    local->stream = std::make_unique<asio::posix::stream_descriptor>(*ioc_);
    beast::error_code ec;
    local->stream->assign(local->fd, ec);
    if (ec) local->stream.reset();
    return local;
  }

  Local* Writer(int fd) {
    auto it = writers_.find(fd);
    if (it != writers_.end()) return it->second.get();
    auto local = Open(fd);
    if (!local) return nullptr;
    return writers_.emplace(fd, std::move(local)).first->second.get();
  }

  void ReadFile(std::shared_ptr<Local> file, std::function<void(std::string_view)> on_data) {
    asio::post(*ioc_, [this, file, on_data = std::move(on_data)]() mutable {
      if (out_.size() > kMaxQueued) {
        After(0.005, [this, file, on_data]() mutable { ReadFile(file, std::move(on_data)); });
        return;
      }
      const ssize_t n = ::read(file->fd, file->buffer.data(), file->buffer.size());
      if (n <= 0) return on_data({});
      on_data(std::string_view(file->buffer.data(), static_cast<size_t>(n)));
      ReadFile(file, std::move(on_data));
    });
  }

  void ReadFrom(Local* local, std::function<void(std::string_view)> on_data) {
    local->stream->async_read_some(
        asio::buffer(local->buffer),
        [this, local, on_data = std::move(on_data)](beast::error_code ec, size_t n) mutable {
          if (ec) return on_data({});  // its end: EOF, or EIO from a terminal whose child is gone
          on_data(std::string_view(local->buffer.data(), n));
          ReadFrom(local, std::move(on_data));
        });
  }

  void WriteLocal(Local* local) {
    if (local->queue.empty()) {
      if (local->close_when_written) {
        for (auto it = writers_.begin(); it != writers_.end(); ++it) {
          if (it->second.get() == local) {
            writers_.erase(it);
            break;
          }
        }
      }
      return;
    }
    local->writing = true;
    asio::async_write(*local->stream, asio::buffer(local->queue.front()),
                      [this, local](beast::error_code ec, size_t) {
                        local->writing = false;
                        if (ec) {
                          local->queue.clear();  // the reader is gone: what it would get is dropped
                        } else {
                          local->queue.pop_front();
                        }
                        WriteLocal(local);
                      });
  }

  void WriteNext() {
    if (out_.empty()) {
      if (closing_) SendClose();
      return;
    }
    writing_ = true;
    ws_.async_write(asio::buffer(out_.front()), [this](beast::error_code ec, size_t) {
      writing_ = false;
      if (ec) return End("sending to the server: " + ec.message());
      out_.pop_front();
      WriteNext();
    });
  }

  void SendClose() {
    if (close_sent_ || ended_) return;
    close_sent_ = true;
    ws_.async_close(websocket::close_code::normal, [this](beast::error_code) { End(""); });
  }

  void ReadNext() {
    ws_.async_read(in_, [this](beast::error_code ec, size_t) {
      if (ec) {
        const bool closed = ec == websocket::error::closed || close_sent_;
        return End(closed ? "" : "the connection to the server broke: " + ec.message());
      }
      const std::string message = beast::buffers_to_string(in_.data());
      in_.consume(in_.size());
      on_message_(message);
      ReadNext();
    });
  }

  void End(const std::string& reason) {
    if (ended_) return;
    ended_ = true;
    reason_ = reason;
    ioc_->stop();
  }

  std::shared_ptr<asio::io_context> ioc_;
  std::shared_ptr<asio::ssl::context> tls_;
  websocket::stream<Stream> ws_;
  beast::flat_buffer in_;
  std::deque<std::string> out_;
  bool writing_ = false;
  bool closing_ = false;
  bool close_sent_ = false;
  bool ended_ = false;
  std::string reason_;
  std::function<void(std::string_view)> on_message_;
  std::list<std::unique_ptr<Local>> readers_;
  std::map<int, std::unique_ptr<Local>> writers_;
};

// The WebSocket handshake on a connected stream; fills `out` with the socket or the refusal.
template <class Stream>
void Handshake(std::unique_ptr<Client<Stream>> client, asio::io_context& ioc,
               const WebSocketTarget& target, const Origin& origin, WebSocketOpen* out) {
  auto& ws = client->ws();
  ws.set_option(websocket::stream_base::decorator([&target](websocket::request_type& req) {
    for (const auto& [k, v] : target.headers) req.set(k, v);
  }));
  websocket::response_type res;
  const std::string host = origin.host + ":" + origin.port;
  beast::error_code ec = Step(ioc, [&](auto done) {
    ws.async_handshake(res, host, target.path, [done](beast::error_code e) { done(e); });
  });
  if (ec) {
    out->status = static_cast<int>(res.result_int());
    out->body = res.body();
    out->location = std::string(res[http::field::location]);
    out->error =
        out->status != 0
            ? "the server answered " + std::to_string(out->status) + " instead of a WebSocket"
            : "WebSocket handshake with " + target.server + ": " + ec.message();
    return;
  }
  beast::get_lowest_layer(ws).expires_never();  // the WebSocket's own timer from here on
  websocket::stream_base::timeout t;
  t.handshake_timeout = Seconds(target.connect_timeout);
  t.idle_timeout = Seconds(target.idle_timeout);
  t.keep_alive_pings = true;
  ws.set_option(t);
  ws.binary(true);
  out->status = 101;
  out->socket = std::move(client);
}

}  // namespace

WebSocketOpen WebSocketClient::Connect(const WebSocketTarget& target) {
  WebSocketOpen out;
  const std::optional<Origin> origin = ParseOrigin(target.server);
  if (!origin) {
    out.error = "server \"" + target.server + "\" must start with http:// or https://";
    return out;
  }
  auto ioc = std::make_shared<asio::io_context>();
  tcp::resolver resolver(*ioc);
  beast::error_code ec;
  const auto endpoints = resolver.resolve(origin->host, origin->port, ec);
  if (ec) {
    out.error = "cannot resolve " + origin->host + ": " + ec.message();
    return out;
  }
  const auto unreachable = [&](const beast::error_code& e) {
    out.error = "cannot reach " + target.server + ": " +
                (e == beast::error::timeout ? std::string("timed out connecting") : e.message());
  };
  // TCP to the server, under the connect timeout.
  const auto connect = [&](beast::tcp_stream& tcp_stream) {
    tcp_stream.expires_after(Seconds(target.connect_timeout));
    ec = Step(*ioc, [&](auto done) {
      tcp_stream.async_connect(endpoints, [done](beast::error_code e, const auto&) { done(e); });
    });
    if (ec) unreachable(ec);
    return !ec;
  };
  if (!origin->tls) {
    auto client = std::make_unique<Client<beast::tcp_stream>>(ioc, nullptr, *ioc);
    if (!connect(beast::get_lowest_layer(client->ws()))) return out;
    Handshake(std::move(client), *ioc, target, *origin, &out);
    return out;
  }
  auto tls = std::make_shared<asio::ssl::context>(asio::ssl::context::tls_client);
  if (target.insecure) {
    tls->set_verify_mode(asio::ssl::verify_none);
  } else {
    tls->set_verify_mode(asio::ssl::verify_peer);
    if (!target.ca_cert.empty()) {
      tls->load_verify_file(target.ca_cert, ec);
    } else {
      tls->set_default_verify_paths(ec);
    }
    if (ec) {
      out.error = "TLS: cannot load the CA certificate " + target.ca_cert + ": " + ec.message();
      return out;
    }
  }
  using Tls = beast::ssl_stream<beast::tcp_stream>;
  auto client = std::make_unique<Client<Tls>>(ioc, tls, *ioc, *tls);
  Tls& stream = client->ws().next_layer();
  if (!target.insecure) stream.set_verify_callback(asio::ssl::host_name_verification(origin->host));
  SSL_set_tlsext_host_name(stream.native_handle(), origin->host.c_str());
  if (!connect(beast::get_lowest_layer(client->ws()))) return out;
  ec = Step(*ioc, [&](auto done) {
    stream.async_handshake(asio::ssl::stream_base::client,
                           [done](beast::error_code e) { done(e); });
  });
  if (ec) {
    out.error = "TLS handshake with " + target.server + " failed: " + ec.message() +
                " (is the server's certificate trusted? pass --ca-cert FILE)";
    return out;
  }
  Handshake(std::move(client), *ioc, target, *origin, &out);
  return out;
}

}  // namespace meridian::net
