#include "net/http_server.h"

#include <zlib.h>

#include <algorithm>
#include <atomic>
#include <boost/asio.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>
#include <boost/beast/websocket.hpp>
#include <boost/beast/websocket/ssl.hpp>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <future>
#include <map>
#include <mutex>
#include <optional>
#include <regex>
#include <thread>
#include <type_traits>
#include <vector>

#include "base/log.h"
#include "base/strings.h"

namespace meridian::net {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace websocket = beast::websocket;
using tcp = asio::ip::tcp;
using base::Status;

namespace {

std::chrono::steady_clock::duration Seconds(double s) {
  return std::chrono::duration_cast<std::chrono::steady_clock::duration>(
      std::chrono::duration<double>(s));
}

// Whether an Accept-Encoding value takes gzip ("gzip", "gzip;q=0.8", "*"; not "gzip;q=0").
bool AcceptsGzip(const std::string& accepted) {
  for (std::string_view item : base::Split(accepted, ',')) {
    const size_t semi = item.find(';');
    const std::string_view coding = base::Trim(item.substr(0, semi));
    if (!beast::iequals(beast::string_view(coding.data(), coding.size()), "gzip") &&
        coding != "*") {
      continue;
    }
    if (semi != std::string_view::npos) {
      const std::string_view q = base::Trim(item.substr(semi + 1));
      if (q.rfind("q=0", 0) == 0 && q.find_first_not_of("0.", 2) == std::string_view::npos) {
        continue;
      }
    }
    return true;
  }
  return false;
}

std::string ContentType(const Response& r) {
  auto it = r.headers.find("Content-Type");
  return it == r.headers.end() ? "" : it->second;
}

bool Compressible(const std::string& type) {
  return type.rfind("text/", 0) == 0 || type.rfind("application/json", 0) == 0 ||
         type.rfind("application/javascript", 0) == 0 || type.rfind("image/svg+xml", 0) == 0;
}

// The body as a gzip member (zlib's deflate with a gzip wrapper); nullopt if zlib fails. A body
// of a MiB or more (a scrape of /metrics at thousands of nodes: 73 MB at 3,000) is compressed
// at zlib's fastest level: a third of the CPU of its default, for an answer 11% larger.
std::optional<std::string> Gzip(const std::string& in) {
  z_stream z{};
  const int level = in.size() >= (1u << 20) ? Z_BEST_SPEED : Z_DEFAULT_COMPRESSION;
  if (deflateInit2(&z, level, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK) {
    return std::nullopt;
  }
  std::string out(deflateBound(&z, in.size()), '\0');
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in.data()));
  z.avail_in = static_cast<uInt>(in.size());
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = static_cast<uInt>(out.size());
  const int rc = deflate(&z, Z_FINISH);
  out.resize(z.total_out);
  deflateEnd(&z);
  if (rc != Z_STREAM_END) return std::nullopt;
  return out;
}

// Compresses an answer's body for a client that takes gzip (`gzip`), when it is text of 256 bytes
// or more and not compressed already, and says so in its headers.
void MaybeGzip(bool gzip, Response* r) {
  if (!gzip || r->body.size() < 256 || r->headers.count("Content-Encoding") > 0 ||
      !Compressible(ContentType(*r))) {
    return;
  }
  if (auto z = Gzip(r->body)) {
    r->body = std::move(*z);
    r->set_header("Content-Encoding", "gzip");
    r->set_header("Vary", "Accept-Encoding");
  }
}

// A fixed set of threads taking jobs in order.
class WorkerPool {
 public:
  explicit WorkerPool(int n) {
    for (int i = 0; i < std::max(1, n); ++i) threads_.emplace_back([this] { Work(); });
  }
  ~WorkerPool() { Stop(); }
  void Post(std::function<void()> job) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      jobs_.push_back(std::move(job));
    }
    cv_.notify_one();
  }
  // Runs what is queued, then joins.
  void Stop() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopping_ = true;
    }
    cv_.notify_all();
    for (std::thread& t : threads_) {
      if (t.joinable()) t.join();
    }
  }

 private:
  void Work() {
    for (;;) {
      std::function<void()> job;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [this] { return stopping_ || !jobs_.empty(); });
        if (jobs_.empty()) return;
        job = std::move(jobs_.front());
        jobs_.pop_front();
      }
      job();
    }
  }
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> jobs_;
  bool stopping_ = false;
  std::vector<std::thread> threads_;
};

struct Route {
  std::string method;
  std::regex pattern;
  Handler handler;
  std::function<bool(const Request&)> waits;
};

}  // namespace

struct HttpServer::Impl {
  explicit Impl(ServerOptions options) : o(std::move(options)) {}

  static std::vector<std::unique_ptr<asio::io_context>> MakeLoops(int n) {
    std::vector<std::unique_ptr<asio::io_context>> loops;
    for (int i = 0; i < std::max(1, n); ++i) loops.push_back(std::make_unique<asio::io_context>(1));
    return loops;
  }

  ServerOptions o;
  std::vector<Route> routes;
  std::function<std::pair<std::string, std::string>(int, const std::string&)> error_body;
  std::function<bool(const Request&, Response&)> gate;

  // Connections open, in all and per client address.
  mutable std::mutex conn_mu;
  std::map<std::string, int> per_address;
  int open = 0;
  // Handlers that wait, each on a thread of its own.
  std::mutex wait_mu;
  std::condition_variable wait_cv;
  int waiting = 0;
  std::atomic<bool> stopping{false};
  // How to close each open connection, for when the server stops (its clients must not wait
  // for answers that will never come).
  std::mutex live_mu;
  std::map<uint64_t, std::function<void()>> live;
  uint64_t next_id = 0;

  // One event loop per I/O thread, and each connection on one of them, in turn: a request's
  // bytes are read, and its answer written, by one thread, which no other loop's thread wakes or
  // waits for (a loop run by several threads hands each event from one to another).
  // Destroyed before the maps above (members go in reverse order): sessions still queued in
  // a loop give their connection back as it is destroyed.
  std::vector<std::unique_ptr<asio::io_context>> loops = MakeLoops(o.io_threads);
  size_t next_loop = 0;  // the loop of the next connection accepted
  std::optional<asio::ssl::context> tls;
  tcp::acceptor acceptor{*loops[0]};
  asio::steady_timer accept_retry{*loops[0]};
  std::unique_ptr<WorkerPool> workers;

  bool Admit(const std::string& address) {
    std::lock_guard<std::mutex> lock(conn_mu);
    int& mine = per_address[address];
    if (open >= o.max_connections || mine >= o.max_connections_per_address) {
      if (mine == 0) per_address.erase(address);
      return false;
    }
    ++mine;
    ++open;
    return true;
  }
  void Leave(const std::string& address) {
    std::lock_guard<std::mutex> lock(conn_mu);
    --open;
    auto it = per_address.find(address);
    if (it != per_address.end() && --it->second <= 0) per_address.erase(it);
  }

  // The route for a request, with its captures in req->matches; nullptr if none.
  const Route* Find(Request* req) const {
    for (const Route& r : routes) {
      if (r.method != req->method) continue;
      std::smatch m;
      if (!std::regex_match(req->path, m, r.pattern)) continue;
      req->matches.clear();
      for (const auto& part : m) req->matches.push_back(part.str());
      return &r;
    }
    return nullptr;
  }

  // Runs `job` on a thread of its own, unless max_waiting are running already.
  bool StartWaiting(std::function<void()> job) {
    {
      std::lock_guard<std::mutex> lock(wait_mu);
      if (waiting >= o.max_waiting) return false;
      ++waiting;
    }
    std::thread([this, job = std::move(job)] {
      job();
      std::lock_guard<std::mutex> lock(wait_mu);
      --waiting;
      wait_cv.notify_all();
    }).detach();
    return true;
  }

  Response ErrorResponse(int status, const std::string& message) const {
    Response res;
    res.status = status;
    if (error_body) {
      auto [body, type] = error_body(status, message);
      res.set_content(std::move(body), type);
    } else {
      res.set_content(message + "\n", "text/plain");
    }
    return res;
  }

  void Accept();
  void OnAccept(tcp::socket socket);
};

namespace {

// One client connection: reads requests one after another, each under its deadlines, hands
// each whole request to a worker, and writes the answer. No two operations on the stream run at
// once (the next request is read only once the answer is written), and all of them run on the
// connection's strand.
template <class Stream>
class Session : public std::enable_shared_from_this<Session<Stream>> {
 public:
  Session(HttpServer::Impl* server, Stream stream, std::string address)
      : server_(server),
        stream_(std::move(stream)),
        address_(std::move(address)),
        later_timer_(stream_.get_executor()) {}
  ~Session() {
    {
      std::lock_guard<std::mutex> lock(server_->live_mu);
      server_->live.erase(id_);
    }
    server_->Leave(address_);
  }

  void Start() {
    {
      std::lock_guard<std::mutex> lock(server_->live_mu);
      id_ = server_->next_id++;
      server_->live[id_] = [this] {
        beast::error_code ec;
        Tcp().socket().shutdown(tcp::socket::shutdown_both, ec);
        Tcp().socket().close(ec);
      };
    }
    if constexpr (std::is_same_v<Stream, beast::ssl_stream<beast::tcp_stream>>) {
      Tcp().expires_after(Seconds(server_->o.header_timeout));
      stream_.async_handshake(asio::ssl::stream_base::server,
                              [self = this->shared_from_this()](beast::error_code ec) {
                                if (!ec) self->ReadNext();
                              });
    } else {
      ReadNext();
    }
  }

 private:
  beast::tcp_stream& Tcp() { return beast::get_lowest_layer(stream_); }

  // The next request: the first within header_timeout of the connection; later ones may wait
  // idle_timeout for their first byte, then have header_timeout for their headers.
  void ReadNext() {
    if (server_->stopping) return;
    if (first_ || buffer_.size() > 0) {
      first_ = false;
      Tcp().expires_after(Seconds(server_->o.header_timeout));
      ReadHeader();
      return;
    }
    buffer_.shrink_to_fit();  // an idle connection keeps no buffer
    Tcp().expires_after(Seconds(server_->o.idle_timeout));
    stream_.async_read_some(buffer_.prepare(4096),
                            [self = this->shared_from_this()](beast::error_code ec, size_t n) {
                              if (ec) return;  // closed, or idle too long: the session ends
                              self->buffer_.commit(n);
                              self->Tcp().expires_after(Seconds(self->server_->o.header_timeout));
                              self->ReadHeader();
                            });
  }

  void ReadHeader() {
    parser_.emplace();
    parser_->header_limit(16 * 1024);
    parser_->body_limit(server_->o.max_body_bytes);
    http::async_read_header(
        stream_, buffer_, *parser_,
        [self = this->shared_from_this()](beast::error_code ec, size_t) { self->OnHeader(ec); });
  }

  void OnHeader(beast::error_code ec) {
    if (ec) return ReadFailed(ec);
    auto& msg = parser_->get();
    Tcp().expires_after(Seconds(server_->o.body_timeout));
    if (beast::iequals(msg[http::field::expect], "100-continue")) {
      static const std::string kContinue = "HTTP/1.1 100 Continue\r\n\r\n";
      asio::async_write(stream_, asio::buffer(kContinue),
                        [self = this->shared_from_this()](beast::error_code ec, size_t) {
                          if (!ec) self->ReadBody();
                        });
      return;
    }
    ReadBody();
  }

  void ReadBody() {
    http::async_read(stream_, buffer_, *parser_,
                     [self = this->shared_from_this()](beast::error_code ec, size_t) {
                       if (ec) return self->ReadFailed(ec);
                       self->Serve();
                     });
  }

  // A request that could not be read whole: answered when the client can still take an answer
  // (it sent too much or something that is not HTTP), else the connection just ends.
  void ReadFailed(beast::error_code ec) {
    if (ec == http::error::body_limit) {
      keep_alive_ = false;
      return Write(server_->ErrorResponse(413, "request body too large"));
    }
    if (ec == http::error::header_limit) {
      keep_alive_ = false;
      return Write(server_->ErrorResponse(431, "request headers too large"));
    }
    const bool http_error =
        &ec.category() == &http::make_error_code(http::error::end_of_stream).category();
    if (http_error && ec != http::error::end_of_stream && ec != http::error::partial_message) {
      keep_alive_ = false;
      return Write(server_->ErrorResponse(400, "malformed HTTP request"));
    }
  }

  void Serve() {
    auto& msg = parser_->get();
    auto req = std::make_shared<Request>();
    req->method = std::string(msg.method_string());
    req->target = std::string(msg.target());
    const size_t q = req->target.find('?');
    req->path = PercentDecode(req->target.substr(0, q), false);
    if (q != std::string::npos) req->params = ParseQuery(req->target.substr(q + 1));
    for (const auto& field : msg) {
      req->headers.emplace(std::string(field.name_string()), std::string(field.value()));
    }
    req->body = std::move(msg.body());
    req->remote_addr = address_;
    req->websocket = websocket::is_upgrade(msg);
    keep_alive_ = msg.keep_alive();
    version_ = msg.version();
    gzip_ = AcceptsGzip(req->get_header_value("Accept-Encoding"));
    if (req->websocket) {
      upgrade_request_.emplace(parser_->release());
    } else {
      upgrade_request_.reset();
    }
    parser_.reset();
    Tcp().expires_never();  // no operation is pending until the answer is written

    const Route* route = server_->Find(req.get());
    if (route == nullptr) return Write(server_->ErrorResponse(404, "no such path"));
    auto self = this->shared_from_this();
    auto run = [self, req, route, gzip = gzip_] {
      Response res;
      try {
        if (!self->server_->gate || !self->server_->gate(*req, res)) route->handler(*req, res);
      } catch (const std::exception& e) {
        base::log::Error("{} {}: handler failed: {}", req->method, req->path, e.what());
        res = self->server_->ErrorResponse(500, "internal error; the server logs it");
      }
      if (res.status >= 400 && res.body.empty() && !res.stream && !res.later) {
        res = self->server_->ErrorResponse(res.status, "request failed");
      }
      if (res.upgrade) return self->Upgrade(std::move(res));
      if (res.channel) return self->OpenChannel(std::move(res));
      if (res.later) return self->Defer(std::move(res));
      if (res.stream) return self->StreamFrom(std::move(res));
      // Here rather than in Write: a large body's compression (a scrape of /metrics at
      // thousands of nodes) would hold the I/O thread, and every connection of its loop.
      MaybeGzip(gzip, &res);
      asio::post(self->stream_.get_executor(),
                 [self, res = std::move(res)]() mutable { self->Write(std::move(res)); });
    };
    if (route->waits && route->waits(*req)) {
      if (!server_->StartWaiting(run)) {
        Response busy = server_->ErrorResponse(
            503, "the server has as many long polls and watches open as it serves; retry");
        busy.set_header("Retry-After", "1");
        Write(std::move(busy));
      }
      return;
    }
    server_->workers->Post(std::move(run));
  }

  // Writes a whole answer (on the strand), then reads the next request or ends.
  void Write(Response r) {
    auto res = std::make_shared<http::response<http::string_body>>();
    res->version(version_);
    res->result(static_cast<unsigned>(r.status));
    MaybeGzip(gzip_, &r);  // answers that did not come from a worker: errors, long polls
    for (const auto& [k, v] : r.headers) res->insert(k, v);
    const bool keep = keep_alive_ && !server_->stopping;
    res->keep_alive(keep);
    res->body() = std::move(r.body);
    res->prepare_payload();
    Tcp().expires_after(Seconds(server_->o.write_timeout));
    http::async_write(stream_, *res,
                      [self = this->shared_from_this(), res, keep](beast::error_code ec, size_t) {
                        if (ec) return;
                        if (!keep) return self->LingerThenClose();
                        self->ReadNext();
                      });
  }

  // The answer to this request comes through a Later (Response::later), or at the timeout `r`
  // itself. The timer's wait holds the session meanwhile; the Later only points at it, so that
  // a Later kept by its handler past the server's end keeps nothing of it alive.
  class LaterAnswer : public Later {
   public:
    explicit LaterAnswer(std::weak_ptr<Session> s) : s_(std::move(s)) {}
    bool Answer(Response r) override {
      if (answered_.exchange(true)) return false;
      auto s = s_.lock();
      if (!s) return false;
      asio::post(s->stream_.get_executor(), [s, r = std::move(r)]() mutable {
        s->later_timer_.cancel();
        s->Write(std::move(r));
      });
      return true;
    }
    bool waiting() const override { return !answered_ && !s_.expired(); }

   private:
    std::weak_ptr<Session> s_;
    std::atomic<bool> answered_{false};
  };

  void Defer(Response r) {
    auto self = this->shared_from_this();
    auto later = std::make_shared<LaterAnswer>(self);
    auto hand_over = std::move(r.later);
    r.later = nullptr;
    const double timeout = r.later_timeout;
    asio::post(stream_.get_executor(), [self, later, timeout, r = std::move(r)]() mutable {
      self->later_timer_.expires_after(Seconds(timeout));
      self->later_timer_.async_wait([self, later, r = std::move(r)](beast::error_code ec) mutable {
        if (!ec) later->Answer(std::move(r));
      });
    });
    hand_over(later);
  }

  void Close() {
    beast::error_code ec;
    Tcp().socket().shutdown(tcp::socket::shutdown_send, ec);
  }

  // Ends the connection after an answer sent before the request was read whole (413): what the
  // client still sends is read and dropped for a while, so that it gets to read the answer
  // rather than a reset (RFC 9112 section 9.6), up to 4 MiB or 5 seconds.
  void LingerThenClose() {
    Close();
    Tcp().expires_after(std::chrono::seconds(5));
    Drain(4 << 20);
  }
  void Drain(size_t left) {
    if (left == 0) return;
    buffer_.clear();
    stream_.async_read_some(buffer_.prepare(64 * 1024), [self = this->shared_from_this(), left](
                                                            beast::error_code ec, size_t n) {
      if (ec) return;
      self->Drain(n >= left ? 0 : left - n);
    });
  }

  // Runs on the handler's thread: each write is done on the strand while this thread waits for
  // it, at most write_timeout (a client that does not read ends the stream).
  class ChunkSink : public Sink {
   public:
    explicit ChunkSink(std::shared_ptr<Session> s) : s_(std::move(s)) {}
    bool write(const char* data, size_t size) override {
      if (failed_ || done_) return false;
      if (size == 0) return true;
      auto chunk = std::make_shared<std::string>(data, size);
      failed_ = !s_->Blocking([s = s_, chunk](std::function<void(bool)> finished) {
        asio::async_write(s->stream_, http::make_chunk(asio::buffer(*chunk)),
                          [chunk, finished](beast::error_code ec, size_t) { finished(!ec); });
      });
      return !failed_;
    }
    void done() override { done_ = true; }
    bool failed_ = false;
    bool done_ = false;

   private:
    std::shared_ptr<Session> s_;
  };

  // Starts `op` on the strand and waits for it to report; false if it failed, took longer than
  // write_timeout, or the server is stopping.
  bool Blocking(std::function<void(std::function<void(bool)>)> op) {
    return Await([self = this->shared_from_this(), op](std::function<void(bool)> finished) {
      self->Tcp().expires_after(Seconds(self->server_->o.write_timeout));
      op(std::move(finished));
    });
  }
  // Starts `op` on the strand and waits for it to report, under whatever deadline it sets; false
  // if it failed or the server is stopping.
  bool Await(std::function<void(std::function<void(bool)>)> op) {
    auto promise = std::make_shared<std::promise<bool>>();
    std::future<bool> result = promise->get_future();
    asio::post(stream_.get_executor(),
               [op, promise] { op([promise](bool ok) { promise->set_value(ok); }); });
    while (result.wait_for(std::chrono::milliseconds(200)) != std::future_status::ready) {
      if (server_->stopping) return false;
    }
    return result.get();
  }

  // The WebSocket a handler took over: each call waits on the handler's thread while its
  // operation runs on the strand. Beast allows one read and one write (or close) at once; the
  // write lock keeps writes and the close apart.
  class WsTunnel : public Tunnel {
   public:
    explicit WsTunnel(std::shared_ptr<Session> s) : s_(std::move(s)) {}
    bool Read(std::string* message) override {
      if (closed_) return false;
      auto buffer = std::make_shared<beast::flat_buffer>();
      const bool ok = s_->Await([s = s_, buffer](std::function<void(bool)> finished) {
        s->ws_->async_read(*buffer,
                           [buffer, finished](beast::error_code ec, size_t) { finished(!ec); });
      });
      if (!ok) return false;
      *message = beast::buffers_to_string(buffer->data());
      return true;
    }
    bool Write(std::string_view message) override {
      std::lock_guard<std::mutex> lock(write_mu_);
      if (closed_) return false;
      auto data = std::make_shared<std::string>(message);
      return s_->Await([s = s_, data](std::function<void(bool)> finished) {
        s->ws_->async_write(asio::buffer(*data),
                            [data, finished](beast::error_code ec, size_t) { finished(!ec); });
      });
    }
    void Close() override {
      std::lock_guard<std::mutex> lock(write_mu_);
      if (closed_.exchange(true)) return;
      s_->Await([s = s_](std::function<void(bool)> finished) {
        s->ws_->async_close(websocket::close_code::normal,
                            [finished](beast::error_code ec) { finished(!ec); });
      });
      asio::post(s_->stream_.get_executor(), [s = s_] {
        beast::error_code ec;
        s->Tcp().socket().shutdown(tcp::socket::shutdown_both, ec);
        s->Tcp().socket().close(ec);
      });
    }

   private:
    std::shared_ptr<Session> s_;
    std::mutex write_mu_;
    std::atomic<bool> closed_{false};
  };

  // Completes the WebSocket handshake, hands the tunnel to the handler's function on this
  // thread, and ends the connection when it returns. The WebSocket keeps itself alive with
  // pings: a peer that answers none within the idle timeout is gone.
  void Upgrade(Response r) {
    if (!AcceptWebSocket()) return;
    auto tunnel = std::make_shared<WsTunnel>(this->shared_from_this());
    r.upgrade(tunnel);
    tunnel->Close();
  }

  // The handshake of a WebSocket, waited for on the handler's thread; false when there is none
  // (a request that asked for no WebSocket is answered 400, a failed handshake just ends).
  bool AcceptWebSocket() {
    auto self = this->shared_from_this();
    if (!upgrade_request_) {
      keep_alive_ = false;
      Response refused = server_->ErrorResponse(
          400, "this path takes a WebSocket: send Connection: Upgrade and Upgrade: websocket");
      asio::post(stream_.get_executor(), [self, refused = std::move(refused)]() mutable {
        self->Write(std::move(refused));
      });
      return false;
    }
    const bool accepted = Await([self](std::function<void(bool)> finished) {
      self->ws_.emplace(self->stream_);
      self->Tcp().expires_never();  // the WebSocket's own timer from here on
      websocket::stream_base::timeout t;
      t.handshake_timeout = Seconds(self->server_->o.header_timeout);
      t.idle_timeout = Seconds(self->server_->o.tunnel_idle_timeout);
      t.keep_alive_pings = true;
      self->ws_->set_option(t);
      self->ws_->binary(true);
      self->ws_->read_message_max(self->server_->o.max_body_bytes);
      self->ws_->async_accept(*self->upgrade_request_,
                              [finished](beast::error_code ec) { finished(!ec); });
    });
    if (!accepted) {
      // No WebSocket to close politely: the connection just ends.
      asio::post(stream_.get_executor(), [self] {
        beast::error_code ec;
        self->Tcp().socket().shutdown(tcp::socket::shutdown_both, ec);
        self->Tcp().socket().close(ec);
      });
      return false;
    }
    return true;
  }

  // A WebSocket taken as a channel (Response::channel): the Session's strand reads a message,
  // a worker handles it, and only then is the next one read, so that one channel's messages are
  // handled one at a time and in order and a channel holds no thread while quiet. What the
  // handler sends is queued and written on the strand, one write at a time as Beast requires.
  class WsChannel : public Channel {
   public:
    explicit WsChannel(std::weak_ptr<Session> s) : s_(std::move(s)) {}
    bool Send(std::string message) override {
      if (ended_) return false;
      auto s = s_.lock();
      if (!s) return false;
      asio::post(s->stream_.get_executor(),
                 [s, m = std::move(message)]() mutable { s->ChannelWrite(std::move(m)); });
      return true;
    }
    void Close() override {
      if (ended_.exchange(true)) return;
      if (auto s = s_.lock()) asio::post(s->stream_.get_executor(), [s] { s->ChannelClose(); });
    }
    bool open() const override { return !ended_; }
    std::atomic<bool> ended_{false};

   private:
    // Weak: a handler may keep its channel past the connection (a doorbell's waits).
    std::weak_ptr<Session> s_;
  };

  void OpenChannel(Response r) {
    if (!AcceptWebSocket()) return;
    auto self = this->shared_from_this();
    channel_ = std::make_shared<WsChannel>(self);
    on_message_ = r.channel(channel_);
    if (!on_message_) channel_->Close();
    asio::post(stream_.get_executor(), [self] { self->ChannelRead(); });
  }
  void ChannelRead() {
    if (channel_ended_) return;
    auto self = this->shared_from_this();
    ws_->async_read(buffer_, [self](beast::error_code ec, size_t) {
      if (ec) return self->ChannelEnded();
      std::string message = beast::buffers_to_string(self->buffer_.data());
      self->buffer_.consume(self->buffer_.size());
      self->server_->workers->Post([self, message = std::move(message)]() mutable {
        try {
          self->on_message_(std::move(message));
        } catch (const std::exception& e) {
          base::log::Error("a channel's handler failed: {}", e.what());
        }
        asio::post(self->stream_.get_executor(), [self] { self->ChannelRead(); });
      });
    });
  }
  void ChannelWrite(std::string message) {
    if (channel_ended_) return;
    // A peer that sends and does not read would queue answers without end: cut off.
    if (outbox_.size() >= kChannelOutbox) {
      base::log::Warn("a channel's peer takes none of {} messages queued for it: closed",
                      outbox_.size());
      return ChannelEnded();
    }
    outbox_.push_back(std::move(message));
    if (outbox_.size() == 1) ChannelWriteFront();
  }
  void ChannelWriteFront() {
    auto self = this->shared_from_this();
    ws_->async_write(asio::buffer(outbox_.front()), [self](beast::error_code ec, size_t) {
      self->outbox_.pop_front();
      if (ec) return self->ChannelEnded();
      if (!self->outbox_.empty()) return self->ChannelWriteFront();
      if (self->channel_->ended_ && !self->channel_ended_) self->ChannelClose();
    });
  }
  // The handler's Close: once what is queued is written, a close frame, then the connection.
  void ChannelClose() {
    if (channel_ended_ || !outbox_.empty()) return;  // the last write closes
    channel_ended_ = true;
    auto self = this->shared_from_this();
    ws_->async_close(websocket::close_code::normal, [self](beast::error_code) {
      beast::error_code ec;
      self->Tcp().socket().shutdown(tcp::socket::shutdown_both, ec);
      self->Tcp().socket().close(ec);
    });
  }
  // The peer left, or a read or write failed: the channel ends and the connection with it. The
  // outbox stays as it is: a write in flight still points into its front, and its completion
  // takes it off.
  void ChannelEnded() {
    if (channel_ended_) return;
    channel_ended_ = true;
    channel_->ended_ = true;
    beast::error_code ec;
    Tcp().socket().shutdown(tcp::socket::shutdown_both, ec);
    Tcp().socket().close(ec);
  }

  void StreamFrom(Response r) {
    auto self = this->shared_from_this();
    auto head = std::make_shared<http::response<http::empty_body>>();
    head->version(version_);
    head->result(static_cast<unsigned>(r.status));
    for (const auto& [k, v] : r.headers) head->insert(k, v);
    head->chunked(true);
    const bool keep = keep_alive_;
    head->keep_alive(keep);
    auto serializer = std::make_shared<http::response_serializer<http::empty_body>>(*head);
    bool ok = Blocking([self, head, serializer](std::function<void(bool)> finished) {
      http::async_write_header(
          self->stream_, *serializer,
          [head, serializer, finished](beast::error_code ec, size_t) { finished(!ec); });
    });
    ChunkSink sink(self);
    while (ok && !sink.done_ && !sink.failed_) {
      if (!r.stream(sink)) ok = false;
    }
    ok = ok && !sink.failed_ && Blocking([self](std::function<void(bool)> finished) {
           asio::async_write(self->stream_, http::make_chunk_last(),
                             [finished](beast::error_code ec, size_t) { finished(!ec); });
         });
    asio::post(stream_.get_executor(), [self, ok, keep] {
      if (ok && keep && !self->server_->stopping) {
        self->ReadNext();
      } else {
        self->Close();
      }
    });
  }

  HttpServer::Impl* server_;
  Stream stream_;
  std::string address_;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  // A WebSocket handshake's request, kept for the handshake; then the WebSocket on this stream.
  std::optional<http::request<http::string_body>> upgrade_request_;
  std::optional<websocket::stream<Stream&>> ws_;
  // A channel's state, on the strand but for what the handler's function holds.
  std::shared_ptr<WsChannel> channel_;
  std::function<void(std::string)> on_message_;
  std::deque<std::string> outbox_;
  static constexpr size_t kChannelOutbox = 256;  // messages queued for a peer, at most
  bool channel_ended_ = false;
  asio::steady_timer later_timer_;  // the timeout of an answer given later
  uint64_t id_ = 0;
  bool first_ = true;
  bool keep_alive_ = true;
  bool gzip_ = false;
  unsigned version_ = 11;
};

}  // namespace

void HttpServer::Impl::Accept() {
  asio::io_context& loop = *loops[next_loop++ % loops.size()];
  acceptor.async_accept(asio::make_strand(loop), [this](beast::error_code ec, tcp::socket socket) {
    if (stopping || ec == asio::error::operation_aborted) return;
    if (ec) {
      // Out of file descriptors (or another transient failure): try again shortly rather than
      // spin on a listening socket that stays readable.
      accept_retry.expires_after(std::chrono::milliseconds(50));
      accept_retry.async_wait([this](beast::error_code e) {
        if (!e) Accept();
      });
      return;
    }
    OnAccept(std::move(socket));
    Accept();
  });
}

void HttpServer::Impl::OnAccept(tcp::socket socket) {
  beast::error_code ec;
  const auto remote = socket.remote_endpoint(ec);
  if (ec) return;
  const std::string address = remote.address().to_string();
  if (!Admit(address)) return;  // the socket closes as it goes out of scope
  socket.set_option(tcp::no_delay(true), ec);
  if (tls) {
    using Tls = beast::ssl_stream<beast::tcp_stream>;
    std::make_shared<Session<Tls>>(this, Tls(beast::tcp_stream(std::move(socket)), *tls), address)
        ->Start();
  } else {
    std::make_shared<Session<beast::tcp_stream>>(this, beast::tcp_stream(std::move(socket)),
                                                 address)
        ->Start();
  }
}

HttpServer::HttpServer(ServerOptions options) : impl_(std::make_unique<Impl>(std::move(options))) {}

HttpServer::~HttpServer() = default;

void HttpServer::Handle(const std::string& method, const std::string& pattern, Handler handler,
                        std::function<bool(const Request&)> waits) {
  impl_->routes.push_back(Route{method, std::regex(pattern, std::regex::ECMAScript),
                                std::move(handler), std::move(waits)});
}

void HttpServer::Answer(Request& req, Response& res) {
  Impl& s = *impl_;
  const Route* route = s.Find(&req);
  if (route == nullptr) {
    res = s.ErrorResponse(404, "no such path");
    return;
  }
  try {
    if (!s.gate || !s.gate(req, res)) route->handler(req, res);
  } catch (const std::exception& e) {
    base::log::Error("{} {}: handler failed: {}", req.method, req.path, e.what());
    res = s.ErrorResponse(500, "internal error; the server logs it");
  }
  if (res.stream || res.later || res.upgrade || res.channel) {
    res = s.ErrorResponse(400, req.path + " is answered only on a connection of its own");
  }
}

void HttpServer::SetGate(std::function<bool(const Request&, Response&)> gate) {
  impl_->gate = std::move(gate);
}

void HttpServer::SetErrorBody(
    std::function<std::pair<std::string, std::string>(int, const std::string&)> f) {
  impl_->error_body = std::move(f);
}

base::Result<int> HttpServer::Bind(const std::string& host, int port) {
  Impl& s = *impl_;
  if (!s.o.tls_cert.empty()) {
    s.tls.emplace(asio::ssl::context::tls_server);
    beast::error_code ec;
    s.tls->set_options(asio::ssl::context::default_workarounds | asio::ssl::context::no_sslv2 |
                       asio::ssl::context::no_sslv3 | asio::ssl::context::no_tlsv1 |
                       asio::ssl::context::no_tlsv1_1);
    s.tls->use_certificate_chain_file(s.o.tls_cert, ec);
    if (!ec) s.tls->use_private_key_file(s.o.tls_key, asio::ssl::context::pem, ec);
    if (ec) {
      return Status::Invalid("--tls-cert/--tls-key: cannot load " + s.o.tls_cert + " and " +
                             s.o.tls_key + ": " + ec.message());
    }
  }
  beast::error_code ec;
  const auto address = asio::ip::make_address(host == "localhost" ? "127.0.0.1" : host, ec);
  if (ec) return Status::Invalid("--listen: \"" + host + "\" is not an IP address");
  const tcp::endpoint endpoint(address, static_cast<unsigned short>(port));
  s.acceptor.open(endpoint.protocol(), ec);
  if (!ec) s.acceptor.set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) s.acceptor.bind(endpoint, ec);
  if (!ec) s.acceptor.listen(1024, ec);
  if (ec)
    return Status::Io("cannot bind " + host + ":" + std::to_string(port) + ": " + ec.message());
  return static_cast<int>(s.acceptor.local_endpoint().port());
}

void HttpServer::Run() {
  Impl& s = *impl_;
  s.workers = std::make_unique<WorkerPool>(s.o.workers);
  s.Accept();
  // Each loop runs until Stop, also while it has no connection.
  std::vector<asio::executor_work_guard<asio::io_context::executor_type>> kept;
  for (auto& loop : s.loops) kept.push_back(asio::make_work_guard(*loop));
  std::vector<std::thread> io;
  for (size_t i = 1; i < s.loops.size(); ++i) io.emplace_back([&s, i] { s.loops[i]->run(); });
  s.loops[0]->run();
  for (std::thread& t : io) t.join();
  // No I/O thread runs now: the listener and every connection are closed here, so that clients
  // are refused or see the connection end at once.
  beast::error_code ec;
  s.acceptor.close(ec);
  {
    std::lock_guard<std::mutex> lock(s.live_mu);
    for (auto& [id, close] : s.live) close();
  }
  // Handlers still running end on their own (their answers go nowhere now).
  s.workers->Stop();
  std::unique_lock<std::mutex> lock(s.wait_mu);
  s.wait_cv.wait(lock, [&s] { return s.waiting == 0; });
}

void HttpServer::Stop() {
  impl_->stopping = true;
  for (auto& loop : impl_->loops) loop->stop();
}

int HttpServer::connections() const {
  std::lock_guard<std::mutex> lock(impl_->conn_mu);
  return impl_->open;
}

}  // namespace meridian::net
