#include "bench/async_agents.h"

// Boost 1.74's asio/awaitable.hpp uses std::exchange without including <utility>: it must
// come first.
// clang-format off
#include <utility>
// clang-format on

#include <sys/resource.h>

#include <boost/asio.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/websocket.hpp>
#include <chrono>
#include <future>
#include <nlohmann/json.hpp>
#include <optional>
#include <thread>

#include "protocol/agent_protocol.h"

namespace meridian::bench {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace websocket = beast::websocket;
using tcp = asio::ip::tcp;
using Clock = std::chrono::steady_clock;
using Json = nlohmann::json;

namespace {

struct Agent {
  std::string node;
  std::string credential;
  std::unique_ptr<asio::steady_timer> timer;  // its next heartbeat; cancelled to ring it
  Clock::time_point due;
  bool rung = false;
  Json assigned = Json::array();  // the tasks the last answer listed
  // Its heartbeats' connection, kept open between them as `meridian agent` keeps its own
  // (cli::ClientConfig::keep_connection), and what was read past the last answer.
  std::optional<beast::tcp_stream> link;
  beast::flat_buffer link_buffer;
  // With AsyncAgentsOptions::channel: its WebSocket, and the answer its reader hands the
  // heartbeat waiting on `answered` (cancelled to wake it).
  std::shared_ptr<websocket::stream<beast::tcp_stream>> channel;
  std::unique_ptr<asio::steady_timer> answered;
  std::optional<protocol::ChannelMessage> answer;  // status 0: it had none
};

Clock::duration Seconds(double s) {
  return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s));
}

}  // namespace

struct AsyncAgents::Loop {
  AsyncAgentsOptions o;
  asio::io_context io{1};  // first: destroyed last, after what its coroutines refer to
  tcp::endpoint server;
  std::vector<Agent> agents;
  std::string telemetry;  // the GPUs' samples, as JSON text: the same in every heartbeat
  AsyncAgentsStats stats;
  std::thread thread;
  bool running = false;

  explicit Loop(AsyncAgentsOptions options)
      : o(std::move(options)),
        server(asio::ip::make_address("127.0.0.1"), static_cast<uint16_t>(o.port)) {
    Json samples = Json::array();
    for (int g = 0; g < o.gpus_per_node; ++g) {
      samples.push_back({{"index", g},
                         {"utilization", 0.5},
                         {"memoryUsedMib", 40000},
                         {"temperatureC", 55},
                         {"powerW", 400},
                         {"eccErrors", 0}});
    }
    telemetry = samples.dump();
  }

  // What they saw so far, with the tasks they last reported running.
  AsyncAgentsStats Tally() const {
    AsyncAgentsStats s = stats;
    s.tasks_reported = 0;
    for (const Agent& a : agents) s.tasks_reported += static_cast<int64_t>(a.assigned.size());
    return s;
  }

  std::string HeartbeatBody(const Agent& a) const {
    Json tasks = Json::array();
    for (const Json& t : a.assigned) {
      tasks.push_back({{"job", t.value("job", 0)},
                       {"task", t.value("task", 0)},
                       {"generation", t.value("generation", 0)},
                       {"state", "Running"},
                       {"restarts", 0}});
    }
    return R"({"telemetry":)" + telemetry + R"(,"tasks":)" + tasks.dump() + "}";
  }

  // One heartbeat over the agent's kept connection, as `meridian agent` sends it: opened when
  // there is none, and opened again once when the kept one turns out closed (the server's idle
  // timeout, a restart), as its HTTP client does.
  asio::awaitable<void> Heartbeat(Agent& a) {
    http::request<http::string_body> req{http::verb::post,
                                         "/api/v1/agents/" + a.node + "/heartbeat", 11};
    req.set(http::field::host, "127.0.0.1");
    req.set(http::field::authorization, "Bearer " + a.credential);
    req.set(http::field::content_type, "application/json");
    req.keep_alive(true);
    req.body() = HeartbeatBody(a);
    req.prepare_payload();
    const auto t0 = Clock::now();
    http::response<http::string_body> res;
    for (int attempt = 0;; ++attempt) {
      const bool reused = a.link.has_value();
      try {
        if (!a.link) {
          a.link.emplace(io);
          a.link_buffer.clear();
          a.link->expires_after(std::chrono::seconds(30));
          co_await a.link->async_connect(server, asio::use_awaitable);
          a.link->socket().set_option(tcp::no_delay(true));
        }
        a.link->expires_after(std::chrono::seconds(30));
        co_await http::async_write(*a.link, req, asio::use_awaitable);
        co_await http::async_read(*a.link, a.link_buffer, res, asio::use_awaitable);
        if (!res.keep_alive()) a.link.reset();
        break;
      } catch (const std::exception& e) {
        a.link.reset();
        if (reused && attempt == 0) continue;
        ++stats.errors;
        ++stats.error_kinds[e.what()];
        co_return;
      }
    }
    Answered(a, res.result_int(), res.body(), t0);
  }

  // What a heartbeat's answer says, over either connection.
  void Answered(Agent& a, int status, const std::string& body, Clock::time_point sent) {
    if (status != 200) {
      ++stats.errors;
      ++stats.error_kinds["HTTP " + std::to_string(status)];
      return;
    }
    ++stats.heartbeats;
    stats.latency_ms.push_back(
        std::chrono::duration<double, std::milli>(Clock::now() - sent).count());
    const Json answer = Json::parse(body, nullptr, false);
    Json tasks = answer.is_object() ? answer.value("tasks", Json::array()) : Json::array();
    // New tasks are reported running at once, as an agent does once it has started them.
    if ((o.waits || o.channel) && tasks.size() > a.assigned.size()) a.rung = true;
    a.assigned = std::move(tasks);
  }

  // One heartbeat over the agent's channel, opened when it has none: the body as a message,
  // and the answer ("STATUS BODY") as its reader hands it over.
  asio::awaitable<void> ChannelHeartbeat(Agent& a) {
    const auto t0 = Clock::now();
    try {
      if (!a.channel) {
        auto ws = std::make_shared<websocket::stream<beast::tcp_stream>>(io);
        beast::get_lowest_layer(*ws).expires_after(std::chrono::seconds(30));
        co_await beast::get_lowest_layer(*ws).async_connect(server, asio::use_awaitable);
        beast::get_lowest_layer(*ws).socket().set_option(tcp::no_delay(true));
        beast::get_lowest_layer(*ws).expires_never();  // the WebSocket's own timeouts now
        ws->set_option(websocket::stream_base::timeout::suggested(beast::role_type::client));
        ws->set_option(websocket::stream_base::decorator(
            [credential = a.credential](websocket::request_type& req) {
              req.set(http::field::authorization, "Bearer " + credential);
            }));
        ws->binary(true);
        co_await ws->async_handshake("127.0.0.1", "/api/v1/agents/" + a.node + "/channel",
                                     asio::use_awaitable);
        a.channel = ws;
        asio::co_spawn(io, Read(a, ws), asio::detached);
      }
      a.answer.reset();
      auto ws = a.channel;
      const std::string body = HeartbeatBody(a);
      co_await ws->async_write(asio::buffer(body), asio::use_awaitable);
      if (!a.answer && a.channel == ws) {  // its reader may have had it, or ended, already
        a.answered->expires_after(std::chrono::seconds(30));
        boost::system::error_code woken;
        co_await a.answered->async_wait(asio::redirect_error(asio::use_awaitable, woken));
      }
      if (!a.answer) throw std::runtime_error(a.channel ? "no answer within 30 s" : "closed");
    } catch (const std::exception& e) {
      if (a.channel) {
        // Closed, not only dropped: its reader would keep it open (and answer the server's
        // pings) until a frame came.
        boost::system::error_code ignored;
        beast::get_lowest_layer(*a.channel).socket().close(ignored);
      }
      a.channel.reset();
      ++stats.errors;
      ++stats.error_kinds[e.what()];
      co_return;
    }
    Answered(a, a.answer->status, a.answer->body, t0);
  }

  // Agent a's channel's messages: rings, and its heartbeats' answers.
  asio::awaitable<void> Read(Agent& a, std::shared_ptr<websocket::stream<beast::tcp_stream>> ws) {
    beast::flat_buffer buffer;
    for (;;) {
      boost::system::error_code ec;
      co_await ws->async_read(buffer, asio::redirect_error(asio::use_awaitable, ec));
      if (ec || a.channel != ws) break;
      std::string m = beast::buffers_to_string(buffer.data());
      buffer.consume(buffer.size());
      auto message = protocol::DecodeChannelMessage(m);
      if (message && message->ring) {
        ++stats.waits_answered;
        a.rung = true;
        a.timer->cancel();
      } else {
        a.answer = message ? std::move(*message) : protocol::ChannelMessage{};
        a.answered->cancel();
      }
    }
    if (a.channel == ws) {
      a.channel.reset();
      a.answered->cancel();  // a heartbeat waiting for its answer gets none
    }
  }

  // Agent a's heartbeats: every interval, and at once when rung.
  asio::awaitable<void> Heartbeats(Agent& a) {
    const Clock::duration interval = Seconds(o.interval);
    for (;;) {
      if (!a.rung) {
        a.timer->expires_at(a.due);
        boost::system::error_code ignored;
        co_await a.timer->async_wait(asio::redirect_error(asio::use_awaitable, ignored));
      }
      const auto now = Clock::now();
      const bool rung = std::exchange(a.rung, false);
      if (!rung && now < a.due) continue;
      // One that fell behind skips what it missed: heartbeats/s then says so.
      while (a.due <= now) a.due += interval;
      if (o.channel) {
        co_await ChannelHeartbeat(a);
      } else {
        co_await Heartbeat(a);
      }
    }
  }

  // Agent a's wait for orders: a long poll on one kept-alive connection; a new version rings it.
  asio::awaitable<void> Waits(Agent& a) {
    uint64_t seen = 0;
    std::optional<beast::tcp_stream> stream;
    beast::flat_buffer buffer;
    for (;;) {
      bool failed = false;
      try {
        if (!stream) {
          stream.emplace(io);
          stream->expires_after(std::chrono::seconds(10));
          co_await stream->async_connect(server, asio::use_awaitable);
        }
        http::request<http::empty_body> req{
            http::verb::get,
            "/api/v1/agents/" + a.node + "/wait?seen=" + std::to_string(seen) + "&timeout=25", 11};
        req.set(http::field::host, "127.0.0.1");
        req.set(http::field::authorization, "Bearer " + a.credential);
        req.keep_alive(true);
        stream->expires_after(std::chrono::seconds(40));
        co_await http::async_write(*stream, req, asio::use_awaitable);
        http::response<http::string_body> res;
        co_await http::async_read(*stream, buffer, res, asio::use_awaitable);
        if (res.result_int() != 200) {
          failed = true;
        } else {
          ++stats.waits_answered;
          const Json answer = Json::parse(res.body(), nullptr, false);
          const uint64_t version = answer.is_object() ? answer.value("version", seen) : seen;
          if (version != seen && seen != 0) {
            a.rung = true;
            a.timer->cancel();
          }
          seen = version;
          if (!res.keep_alive()) stream.reset();
        }
      } catch (const std::exception&) {
        failed = true;
      }
      if (failed) {
        stream.reset();
        buffer.clear();
        asio::steady_timer pause(io, std::chrono::seconds(1));
        boost::system::error_code ignored;
        co_await pause.async_wait(asio::redirect_error(asio::use_awaitable, ignored));
      }
    }
  }
};

AsyncAgents::AsyncAgents(AsyncAgentsOptions options)
    : loop_(std::make_unique<Loop>(std::move(options))) {}

AsyncAgents::~AsyncAgents() { Stop(); }

void AsyncAgents::Start() {
  Loop& l = *loop_;
  if (l.running) return;
  // A wait per agent is a descriptor each, and heartbeats take more: the soft limit (often
  // 1,024) is raised as far as the hard one allows.
  rlimit files{};
  if (getrlimit(RLIMIT_NOFILE, &files) == 0 && files.rlim_cur < files.rlim_max) {
    files.rlim_cur = files.rlim_max;
    setrlimit(RLIMIT_NOFILE, &files);
  }
  const size_t n = l.o.nodes.size();
  l.agents.resize(n);
  const auto start = Clock::now();
  for (size_t i = 0; i < n; ++i) {
    Agent& a = l.agents[i];
    a.node = l.o.nodes[i];
    a.credential = i < l.o.credentials.size() ? l.o.credentials[i] : "";
    a.timer = std::make_unique<asio::steady_timer>(l.io);
    a.answered = std::make_unique<asio::steady_timer>(l.io);
    a.due = start + Seconds(static_cast<double>(i) / static_cast<double>(n) * l.o.interval);
    asio::co_spawn(l.io, l.Heartbeats(a), asio::detached);
    if (l.o.waits && !l.o.channel) asio::co_spawn(l.io, l.Waits(a), asio::detached);
  }
  l.running = true;
  l.thread = std::thread([&l] { l.io.run(); });
}

void AsyncAgents::Stop() {
  Loop& l = *loop_;
  if (!l.running) return;
  l.io.stop();
  l.thread.join();
  l.running = false;
  l.stats = l.Tally();
}

const AsyncAgentsStats& AsyncAgents::stats() const { return loop_->stats; }

AsyncAgentsStats AsyncAgents::Snapshot() const {
  Loop& l = *loop_;
  if (!l.running) return l.stats;
  std::promise<AsyncAgentsStats> copy;
  asio::post(l.io, [&] { copy.set_value(l.Tally()); });
  return copy.get_future().get();
}

}  // namespace meridian::bench
