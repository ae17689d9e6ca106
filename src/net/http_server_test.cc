#include "net/http_server.h"

#include <gtest/gtest.h>
#include <httplib.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "base/testing/raw_connection.h"
#include "net/websocket_client.h"

namespace meridian::net {
using base::testing::RawConnection;

namespace {

// A real server on a loopback port, run on a thread of the test.
class Running {
 public:
  explicit Running(ServerOptions o, const std::function<void(HttpServer&)>& routes)
      : server_(std::move(o)) {
    routes(server_);
    server_.SetErrorBody([](int status, const std::string& message) {
      return std::make_pair("error " + std::to_string(status) + ": " + message,
                            std::string("text/plain"));
    });
    auto port = server_.Bind("127.0.0.1", 0);
    EXPECT_TRUE(port.ok());
    port_ = port.ok() ? *port : 0;
    thread_ = std::thread([this] { server_.Run(); });
  }
  ~Running() {
    server_.Stop();
    thread_.join();
  }
  int port() const { return port_; }
  HttpServer& server() { return server_; }

 private:
  HttpServer server_;
  int port_ = 0;
  std::thread thread_;
};

double MillisecondsOf(const std::function<void()>& f) {
  const auto t0 = std::chrono::steady_clock::now();
  f();
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

void Hello(HttpServer& s) {
  s.Handle("GET", "/hello",
           [](const Request&, Response& res) { res.set_content("hi", "text/plain"); });
}

TEST(HttpServer, RoutesMatchTheWholePathWithCapturesAndTheDecodedQuery) {
  Running r({}, [](HttpServer& s) {
    s.Handle("GET", R"(/items/(\d+))", [](const Request& req, Response& res) {
      res.set_content(req.matches[1] + "|" + req.get_param_value("name") + "|" +
                          (req.has_param("flag") ? "flag" : "-") + "|" +
                          req.get_header_value("x-ONE"),
                      "text/plain");
    });
  });
  RawConnection raw(r.port());
  raw.Send("GET /items/42?name=a%20b+c&flag HTTP/1.1\r\nHost: x\r\nX-One: 1\r\n\r\n");
  const std::string ok = raw.Read(2, "|1");
  EXPECT_NE(ok.find("200 OK"), std::string::npos) << ok;
  EXPECT_NE(ok.find("\r\n\r\n42|a b c|flag|1"), std::string::npos) << ok;
  httplib::Client c("127.0.0.1", r.port());
  auto longer = c.Get("/items/42/more");
  ASSERT_TRUE(longer);
  EXPECT_EQ(longer->status, 404);
  EXPECT_EQ(longer->body, "error 404: no such path");
  auto method = c.Post("/items/42", "", "text/plain");
  ASSERT_TRUE(method);
  EXPECT_EQ(method->status, 404);
}

TEST(HttpServer, SlowClientsHoldNoWorkerAndAreCutOffAtTheHeaderDeadline) {
  ServerOptions o;
  o.workers = 1;
  o.header_timeout = 1;
  Running r(o, Hello);
  // 70 clients that send a header line every 0.3 s, never ending their headers.
  std::vector<std::unique_ptr<RawConnection>> slow;
  for (int i = 0; i < 70; ++i) {
    slow.push_back(std::make_unique<RawConnection>(r.port()));
    ASSERT_TRUE(slow.back()->connected());
    slow.back()->Send("GET /hello HTTP/1.1\r\nHost: x\r\n");
  }
  double worst = 0;
  for (int round = 0; round < 3; ++round) {
    for (auto& c : slow) c->Send("X-Slow: 1\r\n");
    httplib::Client c("127.0.0.1", r.port());
    worst = std::max(worst, MillisecondsOf([&] {
                       auto res = c.Get("/hello");
                       ASSERT_TRUE(res);
                       EXPECT_EQ(res->body, "hi");
                     }));
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
  }
  std::printf("a request among 70 slow clients: %.1f ms at worst\n", worst);
  EXPECT_LT(worst, 500);
  // Past the header deadline each slow client is closed without an answer.
  for (auto& c : slow) {
    EXPECT_EQ(c->Read(2), "");
    EXPECT_TRUE(c->closed());
  }
}

TEST(HttpServer, IdleKeepAliveConnectionsHoldNoThreadAndCloseAfterTheIdleTimeout) {
  ServerOptions o;
  o.workers = 2;
  o.idle_timeout = 1;
  Running r(o, Hello);
  std::vector<std::unique_ptr<RawConnection>> idle;
  for (int i = 0; i < 300; ++i) {
    idle.push_back(std::make_unique<RawConnection>(r.port()));
    idle.back()->Send("GET /hello HTTP/1.1\r\nHost: x\r\n\r\n");
    ASSERT_NE(idle.back()->Read(2, "hi").find("200 OK"), std::string::npos);
  }
  EXPECT_EQ(r.server().connections(), 300);
  // Each may ask again on the same connection, and a new client is served at once.
  idle.front()->Send("GET /hello HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_NE(idle.front()->Read(2, "hi").find("200 OK"), std::string::npos);
  httplib::Client c("127.0.0.1", r.port());
  EXPECT_EQ(c.Get("/hello")->body, "hi");
  for (auto& conn : idle) {
    conn->Read(2.5);
    EXPECT_TRUE(conn->closed());
  }
  EXPECT_TRUE([&] {
    for (int i = 0; i < 100 && r.server().connections() > 0; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return r.server().connections() == 0;
  }());
}

TEST(HttpServer, OneAddressHoldsAtMostItsShareOfConnections) {
  ServerOptions o;
  o.max_connections_per_address = 5;
  Running r(o, Hello);
  std::vector<std::unique_ptr<RawConnection>> mine;
  for (int i = 0; i < 5; ++i) {
    mine.push_back(std::make_unique<RawConnection>(r.port(), "127.0.0.1"));
    mine.back()->Send("GET /hello HTTP/1.1\r\nHost: x\r\n\r\n");
    ASSERT_NE(mine.back()->Read(2, "hi").find("200 OK"), std::string::npos);
  }
  RawConnection sixth(r.port(), "127.0.0.1");
  sixth.Send("GET /hello HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_EQ(sixth.Read(2), "");
  EXPECT_TRUE(sixth.closed());
  RawConnection other(r.port(), "127.0.0.2");
  other.Send("GET /hello HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_NE(other.Read(2, "hi").find("200 OK"), std::string::npos);
  // One closed gives its place back.
  mine.pop_back();
  EXPECT_TRUE([&] {
    for (int i = 0; i < 100; ++i) {
      RawConnection again(r.port(), "127.0.0.1");
      again.Send("GET /hello HTTP/1.1\r\nHost: x\r\n\r\n");
      if (again.Read(1, "hi").find("200 OK") != std::string::npos) return true;
    }
    return false;
  }());
}

TEST(HttpServer, WaitingHandlersRunApartFromTheWorkersAndAreBounded) {
  ServerOptions o;
  o.workers = 1;
  o.max_waiting = 3;
  std::mutex mu;
  std::condition_variable cv;
  bool release = false;
  std::atomic<int> waiting{0};
  Running r(o, [&](HttpServer& s) {
    Hello(s);
    s.Handle(
        "GET", "/wait",
        [&](const Request&, Response& res) {
          ++waiting;
          std::unique_lock<std::mutex> lock(mu);
          cv.wait(lock, [&] { return release; });
          res.set_content("waited", "text/plain");
        },
        [](const Request& req) { return req.has_param("wait"); });
  });
  std::vector<std::unique_ptr<RawConnection>> polls;
  for (int i = 0; i < 3; ++i) {
    polls.push_back(std::make_unique<RawConnection>(r.port()));
    polls.back()->Send("GET /wait?wait=1 HTTP/1.1\r\nHost: x\r\n\r\n");
  }
  ASSERT_TRUE([&] {
    for (int i = 0; i < 200 && waiting < 3; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return waiting == 3;
  }());
  // The one worker is free for everything else; a fourth long poll is refused at once.
  httplib::Client c("127.0.0.1", r.port());
  EXPECT_EQ(c.Get("/hello")->body, "hi");
  auto busy = c.Get("/wait?wait=1");
  ASSERT_TRUE(busy);
  EXPECT_EQ(busy->status, 503);
  EXPECT_EQ(busy->get_header_value("Retry-After"), "1");
  {
    std::lock_guard<std::mutex> lock(mu);
    release = true;
  }
  cv.notify_all();
  for (auto& p : polls) EXPECT_NE(p->Read(2, "waited").find("waited"), std::string::npos);
}

TEST(HttpServer, StreamsAreSentChunkByChunkAndTheConnectionIsKept) {
  Running r({}, [](HttpServer& s) {
    Hello(s);
    s.Handle("GET", "/stream", [](const Request&, Response& res) {
      auto n = std::make_shared<int>(0);
      res.set_chunked_content_provider("text/event-stream", [n](Sink& sink) {
        const std::string line = "line " + std::to_string((*n)++) + "\n";
        if (!sink.write(line.data(), line.size())) return false;
        if (*n == 3) sink.done();
        return true;
      });
    });
  });
  httplib::Client c("127.0.0.1", r.port());
  c.set_keep_alive(true);
  auto res = c.Get("/stream");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->get_header_value("Transfer-Encoding"), "chunked");
  EXPECT_EQ(res->body, "line 0\nline 1\nline 2\n");
  EXPECT_EQ(c.Get("/hello")->body, "hi");
  EXPECT_EQ(r.server().connections(), 1);
}

TEST(HttpServer, ABodyOverTheLimitIsAnsweredAndTheClientReadsTheAnswer) {
  ServerOptions o;
  o.max_body_bytes = 1000;
  Running r(o, [](HttpServer& s) {
    s.Handle("POST", "/in", [](const Request& req, Response& res) {
      res.set_content(std::to_string(req.body.size()), "text/plain");
    });
  });
  httplib::Client c("127.0.0.1", r.port());
  auto small = c.Post("/in", std::string(1000, 'x'), "text/plain");
  ASSERT_TRUE(small);
  EXPECT_EQ(small->body, "1000");
  auto large = c.Post("/in", std::string(3 << 20, 'x'), "text/plain");
  ASSERT_TRUE(large);
  EXPECT_EQ(large->status, 413);
  EXPECT_EQ(large->body, "error 413: request body too large");
  RawConnection garbage(r.port());
  garbage.Send("NOT HTTP AT ALL\r\n\r\n");
  EXPECT_NE(garbage.Read(2).find("400 Bad Request"), std::string::npos);
}

TEST(HttpServer, TextIsGzippedForClientsThatAcceptIt) {
  const std::string text(5000, 'a');
  Running r({}, [&](HttpServer& s) {
    s.Handle("GET", "/text",
             [&](const Request&, Response& res) { res.set_content(text, "application/json"); });
  });
  httplib::Client c("127.0.0.1", r.port());
  c.set_decompress(false);
  auto zipped = c.Get("/text", {{"Accept-Encoding", "br, gzip;q=0.5"}});
  ASSERT_TRUE(zipped);
  EXPECT_EQ(zipped->get_header_value("Content-Encoding"), "gzip");
  EXPECT_LT(zipped->body.size(), 200u);
  auto refused = c.Get("/text", {{"Accept-Encoding", "gzip;q=0, br"}});
  ASSERT_TRUE(refused);
  EXPECT_EQ(refused->get_header_value("Content-Encoding"), "");
  EXPECT_EQ(refused->body, text);
  c.set_decompress(true);
  EXPECT_EQ(c.Get("/text")->body, text);
}

TEST(HttpServer, StoppingClosesKeptConnectionsAndTheListenerAtOnce) {
  auto r = std::make_unique<Running>(ServerOptions{}, Hello);
  const int port = r->port();
  RawConnection kept(port);
  kept.Send("GET /hello HTTP/1.1\r\nHost: x\r\n\r\n");
  ASSERT_NE(kept.Read(2, "hi").find("200 OK"), std::string::npos);
  const double stop_ms = MillisecondsOf([&] { r.reset(); });
  // A client of the stopped server learns at once, rather than waiting for its read timeout.
  kept.Read(1);
  EXPECT_TRUE(kept.closed());
  EXPECT_FALSE(RawConnection(port).connected());
  EXPECT_LT(stop_ms, 1000);
}

}  // namespace
}  // namespace meridian::net

namespace meridian::net {
namespace {

// A route that takes its connection over as a WebSocket and answers each message with it
// reversed, until the client closes; without the upgrade headers it is a 400.
void Reverser(HttpServer& s, std::atomic<int>* ended) {
  s.Handle(
      "GET", "/reverse",
      [ended](const Request& req, Response& res) {
        if (req.get_header_value("Authorization") != "Bearer ok") {
          res.status = 403;
          res.set_content("not you", "text/plain");
          return;
        }
        res.status = 101;
        res.upgrade = [ended](std::shared_ptr<Tunnel> t) {
          std::string m;
          while (t->Read(&m)) t->Write(std::string(m.rbegin(), m.rend()));
          ++*ended;
        };
      },
      [](const Request& req) { return req.websocket; });
}

WebSocketTarget ReverserTarget(int port) {
  WebSocketTarget target;
  target.server = "http://127.0.0.1:" + std::to_string(port);
  target.path = "/reverse";
  target.headers["Authorization"] = "Bearer ok";
  return target;
}

TEST(HttpServer, AHandlerTakesItsConnectionOverAsAWebSocket) {
  std::atomic<int> ended{0};
  Running r({}, [&](HttpServer& s) { Reverser(s, &ended); });
  WebSocketTarget target = ReverserTarget(r.port());
  WebSocketOpen open = WebSocketClient::Connect(target);
  ASSERT_TRUE(open.socket) << open.error;
  EXPECT_EQ(open.status, 101);
  std::vector<std::string> got;
  open.socket->Send("abc");
  open.socket->Send(std::string("\0\xff", 2));  // binary, whole
  const std::string why = open.socket->Run([&](std::string_view m) {
    got.emplace_back(m);
    if (got.size() == 2) open.socket->Close();
  });
  EXPECT_EQ(why, "");
  EXPECT_EQ(got, (std::vector<std::string>{"cba", std::string("\xff\0", 2)}));
  EXPECT_TRUE([&] {
    for (int i = 0; i < 100 && ended == 0; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    return ended == 1;
  }());
  // Refused before the upgrade: the client gets the server's status and body.
  target.headers["Authorization"] = "Bearer no";
  WebSocketOpen refused = WebSocketClient::Connect(target);
  EXPECT_FALSE(refused.socket);
  EXPECT_EQ(refused.status, 403);
  EXPECT_EQ(refused.body, "not you");
  // A plain request to a route that upgrades is told what it should have sent.
  httplib::Client c("127.0.0.1", r.port());
  auto plain = c.Get("/reverse", httplib::Headers{{"Authorization", "Bearer ok"}});
  ASSERT_TRUE(plain);
  EXPECT_EQ(plain->status, 400);
  EXPECT_NE(plain->body.find("takes a WebSocket"), std::string::npos) << plain->body;
  // Nothing listens: no answer, and words that say so.
  target.server = "http://127.0.0.1:1";
  WebSocketOpen nobody = WebSocketClient::Connect(target);
  EXPECT_EQ(nobody.status, 0);
  EXPECT_NE(nobody.error.find("cannot reach"), std::string::npos) << nobody.error;
}

// A session's loop reads local descriptors beside the WebSocket: a pipe's bytes go out as
// messages, and its end is seen.
TEST(HttpServer, TheClientLoopCarriesAPipeAndSeesItsEnd) {
  std::atomic<int> ended{0};
  Running r({}, [&](HttpServer& s) { Reverser(s, &ended); });
  WebSocketTarget target = ReverserTarget(r.port());
  WebSocketOpen open = WebSocketClient::Connect(target);
  ASSERT_TRUE(open.socket) << open.error;
  int p[2];
  ASSERT_EQ(pipe(p), 0);
  ASSERT_EQ(write(p[1], "xyz", 3), 3);
  close(p[1]);
  std::string got;
  bool pipe_ended = false;
  open.socket->Watch(p[0], [&](std::string_view data) {
    if (data.empty()) {
      pipe_ended = true;
      return;
    }
    open.socket->Send(std::string(data));
  });
  open.socket->Run([&](std::string_view m) {
    got += m;
    if (got.size() >= 3) open.socket->Close();
  });
  close(p[0]);
  EXPECT_EQ(got, "zyx");
  EXPECT_TRUE(pipe_ended);
}

// A handler that answers later holds no thread: more requests wait than there are workers, and
// each gets its own answer, from another thread or at its timeout, on a connection that stays
// open for the next request.
// A route that takes its connection as a channel: each message is passed through the server's
// routes as a request of its own (GET /hello, or what the message names), and the answer sent
// back as "STATUS BODY"; the channel is kept for pushes from the test's thread.
struct Kept {
  std::mutex mu;
  std::shared_ptr<Channel> last;  // the channel opened last
  int opened = 0;
  // The channel opened as the n-th (the handshake's answer may reach the client first).
  std::shared_ptr<Channel> Await(int n) {
    for (int i = 0; i < 250; ++i) {
      {
        std::lock_guard<std::mutex> lock(mu);
        if (opened == n) return last;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return nullptr;
  }
};

void Channels(HttpServer& s, Kept* kept) {
  s.Handle("GET", "/channel", [&s, kept](const Request&, Response& res) {
    res.status = 101;
    res.channel = [&s, kept](std::shared_ptr<Channel> channel) {
      {
        std::lock_guard<std::mutex> lock(kept->mu);
        kept->last = channel;
        ++kept->opened;
      }
      return [&s, channel](std::string message) {
        Request sub;
        sub.method = "GET";
        sub.path = message.rfind("/", 0) == 0 ? message : "/hello";
        Response answer;
        s.Answer(sub, answer);
        channel->Send(std::to_string(answer.status) + " " + message + ":" + answer.body);
      };
    };
  });
  s.Handle("GET", "/streamed", [](const Request&, Response& res) {
    res.stream = [](Sink& sink) {
      sink.done();
      return true;
    };
  });
}

TEST(HttpServer, AChannelHandlesItsMessagesInOrderThroughTheRoutesAndTakesPushesFromAnyThread) {
  Kept kept;
  ServerOptions o;
  o.workers = 2;
  Running r(o, [&](HttpServer& s) {
    Hello(s);
    Channels(s, &kept);
  });
  WebSocketTarget target;
  target.server = "http://127.0.0.1:" + std::to_string(r.port());
  target.path = "/channel";
  // Quiet channels hold no worker: with two workers, 50 open ones leave plain requests served.
  std::vector<std::unique_ptr<WebSocketClient>> quiet;
  for (int i = 0; i < 50; ++i) {
    WebSocketOpen open = WebSocketClient::Connect(target);
    ASSERT_TRUE(open.socket) << open.error;
    quiet.push_back(std::move(open.socket));
  }
  httplib::Client c("127.0.0.1", r.port());
  auto hello = c.Get("/hello");
  ASSERT_TRUE(hello);
  EXPECT_EQ(hello->body, "hi");

  WebSocketOpen open = WebSocketClient::Connect(target);
  ASSERT_TRUE(open.socket) << open.error;
  std::shared_ptr<Channel> mine = kept.Await(51);
  ASSERT_TRUE(mine);
  for (const char* m : {"a", "b", "/nowhere", "/streamed", "c"}) open.socket->Send(m);
  std::vector<std::string> got;
  std::thread pusher;
  const std::string why = open.socket->Run([&](std::string_view m) {
    got.emplace_back(m);
    if (got.size() == 5) pusher = std::thread([&] { EXPECT_TRUE(mine->Send("pushed")); });
    if (got.size() == 6) open.socket->Close();
  });
  pusher.join();
  EXPECT_EQ(why, "");
  EXPECT_EQ(got, (std::vector<std::string>{
                     "200 a:hi", "200 b:hi", "404 /nowhere:error 404: no such path",
                     "400 /streamed:error 400: /streamed is answered only on a connection of "
                     "its own",
                     "200 c:hi", "pushed"}));
  // Once the client has gone, the channel says so and takes nothing more.
  bool ended = false;
  for (int i = 0; i < 100 && !ended; ++i) {
    ended = !mine->open();
    if (!ended) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_TRUE(ended);
  EXPECT_FALSE(mine->Send("late"));
}

TEST(HttpServer, AnAnswerGivenLaterHoldsNoThreadAndTimesOutWithTheHandlersResponse) {
  std::mutex mu;
  std::vector<std::shared_ptr<Later>> waiting;
  ServerOptions o;
  o.workers = 2;
  Running r(o, [&](HttpServer& s) {
    Hello(s);
    s.Handle("GET", "/wait", [&](const Request& req, Response& res) {
      res.set_content("timed out", "text/plain");
      res.later_timeout = req.has_param("short") ? 0.3 : 30;
      res.later = [&](std::shared_ptr<Later> later) {
        std::lock_guard<std::mutex> lock(mu);
        waiting.push_back(std::move(later));
      };
    });
  });
  constexpr size_t kWaiting = 8;  // four times the workers
  std::vector<std::thread> clients;
  std::vector<std::string> answers(kWaiting);
  for (size_t i = 0; i < kWaiting; ++i) {
    clients.emplace_back([&, i] {
      httplib::Client c("127.0.0.1", r.port());
      auto res = c.Get("/wait");
      if (res) answers[i] = std::to_string(res->status) + " " + res->body;
    });
  }
  for (int i = 0; i < 200; ++i) {
    {
      std::lock_guard<std::mutex> lock(mu);
      if (waiting.size() == kWaiting) break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(25));
  }
  {
    std::lock_guard<std::mutex> lock(mu);
    ASSERT_EQ(waiting.size(), kWaiting);
  }
  // Every worker is free meanwhile.
  httplib::Client other("127.0.0.1", r.port());
  auto hello = other.Get("/hello");
  ASSERT_TRUE(hello);
  EXPECT_EQ(hello->body, "hi");
  std::thread answering([&] {
    std::lock_guard<std::mutex> lock(mu);
    for (const auto& later : waiting) {
      Response res;
      res.status = 201;
      res.set_content("answer", "text/plain");
      EXPECT_TRUE(later->waiting());
      EXPECT_TRUE(later->Answer(std::move(res)));
      EXPECT_FALSE(later->Answer(Response{})) << "only the first answer counts";
      EXPECT_FALSE(later->waiting());
    }
  });
  answering.join();
  for (auto& c : clients) c.join();
  for (const std::string& a : answers) EXPECT_EQ(a, "201 answer");

  // Unanswered: the handler's own response at the timeout, and the connection goes on.
  RawConnection raw(r.port());
  raw.Send("GET /wait?short HTTP/1.1\r\nHost: x\r\n\r\n");
  const double ms = MillisecondsOf([&] {
    const std::string timed_out = raw.Read(5, "timed out");
    EXPECT_NE(timed_out.find("200 OK"), std::string::npos) << timed_out;
  });
  EXPECT_GE(ms, 250);
  raw.Send("GET /hello HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_NE(raw.Read(5, "hi").find("200 OK"), std::string::npos);
  std::lock_guard<std::mutex> lock(mu);
  EXPECT_FALSE(waiting.back()->Answer(Response{})) << "answered at its timeout already";
}

}  // namespace
}  // namespace meridian::net
