// The server's TLS context: TLS 1.2 and 1.3 only, PEM files, errors that name
// the flag and the file (a missing file, one that holds no certificate or
// key, a key that is not the certificate's, an encrypted key).
#include "server/http/tls_context.h"

#include <openssl/err.h>
#include <openssl/ssl.h>

#include <cerrno>
#include <cstring>
#include <fstream>

namespace tern::server {

namespace ssl = boost::asio::ssl;

namespace {

Status check_readable(const char* flag, const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return io_error(std::string("cannot read ") + flag + " " + path + ": " + std::strerror(errno));
  return Status::ok();
}

// OpenSSL's reason for the last failure ("no start line", "key values mismatch").
std::string reason(const boost::system::error_code& ec) {
  std::string r = ec.message();
  ERR_clear_error();
  return r;
}

}  // namespace

Result<std::shared_ptr<ssl::context>> make_tls_context(const TlsOptions& o) {
  if (o.certfile.empty() || o.keyfile.empty())
    return invalid_argument("HTTPS needs both --ssl-certfile and --ssl-keyfile");
  if (o.cert_reqs < 0 || o.cert_reqs > 2)
    return invalid_argument("--ssl-cert-reqs must be 0 (none), 1 (optional) or 2 (required), got " +
                            std::to_string(o.cert_reqs));
  if (o.cert_reqs > 0 && o.ca_certs.empty())
    return invalid_argument("--ssl-cert-reqs " + std::to_string(o.cert_reqs) +
                            " checks client certificates against --ssl-ca-certs: give that file too");
  TERN_RETURN_IF_ERROR(check_readable("--ssl-certfile", o.certfile));
  TERN_RETURN_IF_ERROR(check_readable("--ssl-keyfile", o.keyfile));
  if (!o.ca_certs.empty()) TERN_RETURN_IF_ERROR(check_readable("--ssl-ca-certs", o.ca_certs));

  auto ctx = std::make_shared<ssl::context>(ssl::context::tls_server);
  ctx->set_options(ssl::context::default_workarounds | ssl::context::no_sslv2 | ssl::context::no_sslv3 |
                   ssl::context::no_tlsv1 | ssl::context::no_tlsv1_1 | ssl::context::single_dh_use);
  // An encrypted key would make OpenSSL ask for its passphrase on the terminal.
  ctx->set_password_callback([](size_t, ssl::context::password_purpose) { return std::string(); });
  boost::system::error_code ec;
  ctx->use_certificate_chain_file(o.certfile, ec);
  if (ec) return invalid_argument("--ssl-certfile " + o.certfile + " holds no usable PEM certificate: " + reason(ec));
  ctx->use_private_key_file(o.keyfile, ssl::context::pem, ec);
  if (ec) {
    return invalid_argument("--ssl-keyfile " + o.keyfile +
                            " holds no usable PEM private key (encrypted keys are not supported) or not the key of "
                            "--ssl-certfile " + o.certfile + ": " + reason(ec));
  }
  if (SSL_CTX_check_private_key(ctx->native_handle()) != 1) {
    ERR_clear_error();
    return invalid_argument("--ssl-keyfile " + o.keyfile + " is not the private key of --ssl-certfile " + o.certfile);
  }
  if (!o.ca_certs.empty()) {
    ctx->load_verify_file(o.ca_certs, ec);
    if (ec) return invalid_argument("--ssl-ca-certs " + o.ca_certs + " holds no usable PEM certificate: " + reason(ec));
  }
  ssl::verify_mode mode = ssl::verify_none;
  if (o.cert_reqs >= 1) mode = ssl::verify_peer;
  if (o.cert_reqs == 2) mode |= ssl::verify_fail_if_no_peer_cert;
  ctx->set_verify_mode(mode);
  return ctx;
}

}  // namespace tern::server
