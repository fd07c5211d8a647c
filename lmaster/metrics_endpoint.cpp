#include "metrics_endpoint.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <atomic>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <mutex>
#include <thread>

#include "metrics_exposition.h"

namespace fructosa::master {

namespace asio = boost::asio;
namespace beast = boost::beast;
using tcp = asio::ip::tcp;

namespace {

constexpr std::size_t kMaxConnections = 64;
constexpr auto kIdleTimeout = std::chrono::seconds(30);

}  // namespace

struct MetricsEndpoint::Impl {
  // Declared before io: sessions still pending when io is destroyed use them.
  std::mutex mutex;
  std::shared_ptr<const std::string> text = std::make_shared<const std::string>();
  std::atomic<std::size_t> connections{0};
  std::string url;
  asio::io_context io;
  tcp::acceptor acceptor{io};
  std::thread thread;

  std::shared_ptr<const std::string> current() {
    std::lock_guard lock(mutex);
    return text;
  }

  // One keep-alive connection: read a request, answer it, again until the client closes or
  // stays idle.
  struct Session : std::enable_shared_from_this<Session> {
    Session(Impl& owner, tcp::socket socket) : owner(owner), stream(std::move(socket)) { ++owner.connections; }
    ~Session() { --owner.connections; }

    void read() {
      parser.emplace();
      parser->header_limit(8 * 1024);
      parser->body_limit(0);
      stream.expires_after(kIdleTimeout);
      beast::http::async_read(stream, buffer, *parser, [self = shared_from_this()](beast::error_code error, std::size_t) {
        if (!error) self->answer();
      });
    }

    void answer() {
      const auto& request = parser->get();
      auto response = std::make_shared<beast::http::response<beast::http::string_body>>();
      response->version(request.version());
      response->keep_alive(request.keep_alive());
      response->set(beast::http::field::server, "fructosa-lmaster/" FRUCTOSA_VERSION);
      bool head = request.method() == beast::http::verb::head;
      if (request.method() != beast::http::verb::get && !head) {
        response->result(beast::http::status::method_not_allowed);
        response->set(beast::http::field::allow, "GET, HEAD");
        response->set(beast::http::field::content_type, "text/plain");
        response->body() = "only GET /metrics\n";
      } else if (request.target() != "/metrics" && !request.target().starts_with("/metrics?")) {
        response->result(beast::http::status::not_found);
        response->set(beast::http::field::content_type, "text/plain");
        response->body() = "lmaster serves /metrics\n";
      } else {
        response->result(beast::http::status::ok);
        response->set(beast::http::field::content_type, std::string(kExpositionContentType));
        response->body() = *owner.current();
      }
      response->prepare_payload();
      if (head) response->body().clear();
      beast::http::async_write(stream, *response,
                        [self = shared_from_this(), response](beast::error_code error, std::size_t) {
                          if (error || !response->keep_alive()) {
                            beast::error_code ignored;
                            self->stream.socket().shutdown(tcp::socket::shutdown_send, ignored);
                            return;
                          }
                          self->read();
                        });
    }

    Impl& owner;
    beast::tcp_stream stream;
    beast::flat_buffer buffer{8 * 1024};
    std::optional<beast::http::request_parser<beast::http::empty_body>> parser;
  };

  void accept() {
    acceptor.async_accept([this](beast::error_code error, tcp::socket socket) {
      if (error == asio::error::operation_aborted) return;
      if (!error) {
        if (connections.load() >= kMaxConnections) {
          beast::error_code ignored;
          socket.close(ignored);  // a client holding many connections gets no more
        } else {
          std::make_shared<Session>(*this, std::move(socket))->read();
        }
      }
      accept();
    });
  }
};

MetricsEndpoint::MetricsEndpoint(const std::string& listen) : impl_(std::make_unique<Impl>()) {
  std::string host;
  unsigned port = 0;
  if (!split_listen_address(listen, host, port))
    throw std::runtime_error(fmt::format("metrics_listen '{}': expected HOST:PORT", listen));
  beast::error_code error;
  tcp::resolver resolver(impl_->io);
  auto found = resolver.resolve(host, std::to_string(port), tcp::resolver::numeric_service, error);
  if (error || found.empty())
    throw std::runtime_error(fmt::format("metrics_listen '{}': cannot resolve {}: {}", listen, host, error.message()));
  tcp::endpoint endpoint = found.begin()->endpoint();
  auto& acceptor = impl_->acceptor;
  acceptor.open(endpoint.protocol(), error);
  if (!error) acceptor.set_option(asio::socket_base::reuse_address(true), error);
  if (!error) acceptor.bind(endpoint, error);
  if (!error) acceptor.listen(asio::socket_base::max_listen_connections, error);
  tcp::endpoint bound;
  if (!error) bound = acceptor.local_endpoint(error);
  if (error) throw std::runtime_error(fmt::format("metrics_listen '{}': cannot listen on {}: {}", listen,
                                                  endpoint.address().to_string(), error.message()));
  std::string address = bound.address().to_string();
  if (bound.address().is_v6()) address = "[" + address + "]";
  impl_->url = fmt::format("http://{}:{}/metrics", address, bound.port());
  impl_->accept();
  impl_->thread = std::thread([impl = impl_.get()] {
    try {
      impl->io.run();
    } catch (const std::exception& exception) {
      spdlog::error("metrics endpoint {} stopped: {}", impl->url, exception.what());
    }
  });
}

MetricsEndpoint::~MetricsEndpoint() {
  asio::post(impl_->io, [impl = impl_.get()] {
    beast::error_code ignored;
    impl->acceptor.close(ignored);
    impl->io.stop();
  });
  if (impl_->thread.joinable()) impl_->thread.join();
}

std::string MetricsEndpoint::url() const { return impl_->url; }

void MetricsEndpoint::publish(std::string exposition) {
  auto text = std::make_shared<const std::string>(std::move(exposition));
  std::lock_guard lock(impl_->mutex);
  impl_->text = std::move(text);
}

}  // namespace fructosa::master
