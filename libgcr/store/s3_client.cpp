// S3Client: see s3_client.h.
#include "store/s3_client.h"

#include <curl/curl.h>

#include <cctype>
#include <chrono>
#include <cstring>
#include <ctime>
#include <random>
#include <thread>

namespace gcr::store {

// One curl easy handle (RAII). curl_easy_reset between requests keeps its connection cache.
class CurlEasy {
 public:
  CurlEasy() : handle_(curl_easy_init()) {}
  ~CurlEasy() {
    if (handle_ != nullptr) curl_easy_cleanup(handle_);
  }
  CurlEasy(const CurlEasy&) = delete;
  CurlEasy& operator=(const CurlEasy&) = delete;
  CURL* get() const { return handle_; }

 private:
  CURL* handle_;
};

namespace {

// A curl header list (RAII).
class CurlHeaders {
 public:
  CurlHeaders() = default;
  ~CurlHeaders() { curl_slist_free_all(list_); }
  CurlHeaders(const CurlHeaders&) = delete;
  CurlHeaders& operator=(const CurlHeaders&) = delete;
  void add(const std::string& line) { list_ = curl_slist_append(list_, line.c_str()); }
  curl_slist* get() const { return list_; }

 private:
  curl_slist* list_ = nullptr;
};

void global_init_once() {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
}

std::string xml_unescape(std::string_view s) {
  std::string out;
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '&') {
      out += s[i];
      continue;
    }
    static const std::pair<std::string_view, char> kEntities[] = {
        {"&amp;", '&'}, {"&lt;", '<'}, {"&gt;", '>'}, {"&quot;", '"'}, {"&apos;", '\''}};
    bool matched = false;
    for (const auto& [name, c] : kEntities) {
      if (s.substr(i, name.size()) == name) {
        out += c;
        i += name.size() - 1;
        matched = true;
        break;
      }
    }
    if (!matched) out += '&';
  }
  return out;
}

// The text of the first <tag>…</tag> in xml, from `from` on; npos-safe.
std::string xml_element(std::string_view xml, std::string_view tag, std::size_t* from = nullptr) {
  std::string open = "<" + std::string(tag) + ">", close = "</" + std::string(tag) + ">";
  std::size_t start = xml.find(open, from != nullptr ? *from : 0);
  if (start == std::string_view::npos) {
    if (from != nullptr) *from = std::string_view::npos;
    return {};
  }
  start += open.size();
  std::size_t end = xml.find(close, start);
  if (end == std::string_view::npos) {
    if (from != nullptr) *from = std::string_view::npos;
    return {};
  }
  if (from != nullptr) *from = end + close.size();
  return xml_unescape(xml.substr(start, end - start));
}

// 409: S3's ConditionalRequestConflict, two conditional writes of one key at once; the retry
// then gets a clear 200 or 412.
bool retryable_status(long status) {
  return status == 409 || status == 429 || status == 500 || status == 502 || status == 503 ||
         status == 504;
}

bool retryable_curl(CURLcode code) {
  switch (code) {
    case CURLE_COULDNT_CONNECT:
    case CURLE_OPERATION_TIMEDOUT:
    case CURLE_SEND_ERROR:
    case CURLE_RECV_ERROR:
    case CURLE_GOT_NOTHING:
    case CURLE_PARTIAL_FILE:
    case CURLE_HTTP2:
    case CURLE_HTTP2_STREAM:
      return true;
    default:
      return false;
  }
}

std::chrono::milliseconds backoff(unsigned attempt) {
  static thread_local std::mt19937 rng{std::random_device{}()};
  unsigned base = 100u << std::min(attempt, 5u);  // 100 ms .. 3.2 s
  std::uniform_int_distribution<unsigned> jitter(base / 2, base);
  return std::chrono::milliseconds(jitter(rng));
}

}  // namespace

struct S3Client::Request {
  const char* method = "GET";
  std::string key;    // "" for the bucket itself
  std::string query;  // canonical, without '?'
  bool if_none_match = false;
  std::string if_match;                              // an ETag, unquoted
  std::uint64_t range_offset = 0, range_bytes = 0;   // range_bytes > 0: a ranged GET
  std::span<const std::span<const std::byte>> body;  // PUT: its parts, in order
  std::uint64_t body_bytes = 0;
  std::span<std::byte> into;             // ranged GET: exactly this many bytes
  std::uint64_t max_bytes = 1ull << 30;  // GET into a vector

  // Per attempt.
  std::size_t body_part = 0, body_part_sent = 0;
  std::vector<std::byte> received;
  std::size_t into_filled = 0;
  bool overflow = false;
  std::string etag, date;  // response headers
};

struct S3Client::Response {
  long status = 0;
  std::vector<std::byte> body;
  std::string etag;  // unquoted
  std::string date;
};

S3Client::S3Client(S3Config config, std::string bucket)
    : config_(std::move(config)), bucket_(std::move(bucket)) {
  global_init_once();
}

S3Client::~S3Client() = default;

std::unique_ptr<CurlEasy> S3Client::take_handle() {
  std::lock_guard lock(pool_mu_);
  if (pool_.empty()) return std::make_unique<CurlEasy>();
  auto easy = std::move(pool_.back());
  pool_.pop_back();
  return easy;
}

void S3Client::return_handle(std::unique_ptr<CurlEasy> easy) {
  std::lock_guard lock(pool_mu_);
  pool_.push_back(std::move(easy));
}

Result<S3Client::Response> S3Client::perform(Request& request) {
  std::string what = std::string(request.method) + " s3://" + bucket_ + "/" + request.key;
  auto easy = take_handle();
  if (easy->get() == nullptr) return make_error(Errc::out_of_memory, "curl_easy_init failed");
  Error last{Errc::internal, what + ": not attempted"};
  for (unsigned attempt = 0; attempt < config_.attempts; ++attempt) {
    if (attempt > 0) std::this_thread::sleep_for(backoff(attempt - 1));
    request.body_part = 0;
    request.body_part_sent = 0;
    request.received.clear();
    request.into_filled = 0;
    request.overflow = false;
    request.etag.clear();
    request.date.clear();
    auto r = perform_once(request, *easy);
    if (!r) {
      last = std::move(r).error();
      bool transport = last.code == Errc::unreachable || last.code == Errc::timeout ||
                       last.code == Errc::io_error;
      if (transport) continue;
      return_handle(std::move(easy));
      return last;
    }
    if (retryable_status(r->status)) {
      std::string_view text(reinterpret_cast<const char*>(r->body.data()), r->body.size());
      last = s3_error(r->status, text, what, config_);
      continue;
    }
    return_handle(std::move(easy));
    return r;
  }
  if (config_.attempts > 1) {
    last.message += " (after " + std::to_string(config_.attempts) + " attempts)";
  }
  return last;
}

Result<S3Client::Response> S3Client::perform_once(Request& request, CurlEasy& easy) {
  CURL* c = easy.get();
  curl_easy_reset(c);
  std::string url = config_.endpoint + "/" + bucket_ + "/" + request.key;
  if (!request.query.empty()) url += "?" + request.query;
  std::string sigv4 = "aws:amz:" + config_.region + ":s3";
  CurlHeaders headers;
  headers.add("x-amz-content-sha256: UNSIGNED-PAYLOAD");
  if (!config_.session_token.empty()) headers.add("x-amz-security-token: " + config_.session_token);
  if (request.if_none_match) headers.add("If-None-Match: *");
  if (!request.if_match.empty()) headers.add("If-Match: " + request.if_match);
  if (request.range_bytes > 0) {
    headers.add("Range: bytes=" + std::to_string(request.range_offset) + "-" +
                std::to_string(request.range_offset + request.range_bytes - 1));
  }
  // Every header given here is signed, even an empty one that tells curl to drop its own (such as
  // "Expect:"), which then is not sent, and the signature no longer matches: add none of those.

  curl_easy_setopt(c, CURLOPT_URL, url.c_str());
  curl_easy_setopt(c, CURLOPT_AWS_SIGV4, sigv4.c_str());
  curl_easy_setopt(c, CURLOPT_USERNAME, config_.access_key.c_str());
  curl_easy_setopt(c, CURLOPT_PASSWORD, config_.secret_key.c_str());
  curl_easy_setopt(c, CURLOPT_HTTPHEADER, headers.get());
  curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
  // Large receive reads: 16 KiB (the default) costs a third of a single stream's throughput.
  curl_easy_setopt(c, CURLOPT_BUFFERSIZE, 512L * 1024);
  curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, 5000L);
  // A transfer that stalls (an endpoint that died mid-response) fails after 20 s below 1 KiB/s.
  curl_easy_setopt(c, CURLOPT_LOW_SPEED_LIMIT, 1024L);
  curl_easy_setopt(c, CURLOPT_LOW_SPEED_TIME, 20L);

  auto write_cb = +[](char* data, size_t size, size_t n, void* user) -> size_t {
    auto* r = static_cast<Request*>(user);
    size_t bytes = size * n;
    auto* p = reinterpret_cast<const std::byte*>(data);
    if (r->range_bytes > 0 && r->received.empty()) {
      if (r->into_filled + bytes > r->into.size()) {
        r->overflow = true;
        return 0;
      }
      std::memcpy(r->into.data() + r->into_filled, p, bytes);
      r->into_filled += bytes;
      return bytes;
    }
    if (r->received.size() + bytes > r->max_bytes) {
      r->overflow = true;
      return 0;
    }
    r->received.insert(r->received.end(), p, p + bytes);
    return bytes;
  };
  auto header_cb = +[](char* data, size_t size, size_t n, void* user) -> size_t {
    auto* r = static_cast<Request*>(user);
    std::string_view line(data, size * n);
    auto value_of = [&](std::string_view name) -> std::optional<std::string> {
      if (line.size() <= name.size() || line[name.size()] != ':') return std::nullopt;
      for (std::size_t i = 0; i < name.size(); ++i) {
        if (std::tolower(static_cast<unsigned char>(line[i])) != name[i]) return std::nullopt;
      }
      std::string_view v = line.substr(name.size() + 1);
      while (!v.empty() && (v.front() == ' ' || v.front() == '"')) v.remove_prefix(1);
      while (!v.empty() &&
             (v.back() == '\r' || v.back() == '\n' || v.back() == ' ' || v.back() == '"')) {
        v.remove_suffix(1);
      }
      return std::string(v);
    };
    if (auto v = value_of("etag")) r->etag = *v;
    if (auto v = value_of("date")) r->date = *v;
    return size * n;
  };
  curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, header_cb);
  curl_easy_setopt(c, CURLOPT_HEADERDATA, &request);
  curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, write_cb);
  curl_easy_setopt(c, CURLOPT_WRITEDATA, &request);

  if (std::strcmp(request.method, "PUT") == 0) {
    auto read_cb = +[](char* out, size_t size, size_t n, void* user) -> size_t {
      auto* r = static_cast<Request*>(user);
      size_t bytes = 0;
      while (bytes < size * n && r->body_part < r->body.size()) {
        std::span<const std::byte> part = r->body[r->body_part];
        size_t take = std::min(size * n - bytes, part.size() - r->body_part_sent);
        std::memcpy(out + bytes, part.data() + r->body_part_sent, take);
        bytes += take;
        r->body_part_sent += take;
        if (r->body_part_sent == part.size()) {
          ++r->body_part;
          r->body_part_sent = 0;
        }
      }
      return bytes;
    };
    curl_easy_setopt(c, CURLOPT_UPLOAD, 1L);
    curl_easy_setopt(c, CURLOPT_READFUNCTION, read_cb);
    curl_easy_setopt(c, CURLOPT_READDATA, &request);
    curl_easy_setopt(c, CURLOPT_INFILESIZE_LARGE, static_cast<curl_off_t>(request.body_bytes));
  } else if (std::strcmp(request.method, "DELETE") == 0) {
    curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, "DELETE");
  }

  // A ranged GET writes into the caller's buffer; an error response (small XML) lands there too
  // and is copied out below, or overflows it, which fails the request either way.
  CURLcode rc = curl_easy_perform(c);
  std::string what = std::string(request.method) + " " + url;
  long status = 0;
  curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
  if (rc != CURLE_OK && !(rc == CURLE_WRITE_ERROR && request.overflow)) {
    Errc code = Errc::io_error;
    std::string hint;
    if (rc == CURLE_COULDNT_CONNECT || rc == CURLE_COULDNT_RESOLVE_HOST ||
        rc == CURLE_COULDNT_RESOLVE_PROXY) {
      code = Errc::unreachable;
      hint = "; is the S3 endpoint " + config_.endpoint +
             " up? (set by AWS_ENDPOINT_URL or the profile's endpoint_url)";
    } else if (rc == CURLE_OPERATION_TIMEDOUT) {
      code = Errc::timeout;
    } else if (!retryable_curl(rc)) {
      code = Errc::unreachable;  // TLS, protocol: the endpoint is not one we can talk to
    }
    return make_error(code, what + ": " + curl_easy_strerror(rc) + hint);
  }
  Response response;
  response.status = status;
  response.etag = std::move(request.etag);
  response.date = std::move(request.date);
  bool success = status >= 200 && status < 300;
  if (request.range_bytes > 0) {
    if (success &&
        (status != 206 || request.overflow || request.into_filled != request.into.size())) {
      return make_error(Errc::io_error, what + ": asked for " +
                                            std::to_string(request.range_bytes) +
                                            " bytes, got status " + std::to_string(status) +
                                            " with " + std::to_string(request.into_filled) +
                                            (request.overflow ? "+" : "") + " bytes");
    }
    if (!success) {
      auto* p = request.into.data();
      response.body.assign(p, p + std::min(request.into_filled, request.into.size()));
    }
  } else {
    if (request.overflow && success) {
      return make_error(Errc::corrupt_image, what + ": object larger than the " +
                                                 std::to_string(request.max_bytes) +
                                                 " bytes allowed");
    }
    response.body = std::move(request.received);
  }
  return response;
}

Error s3_error(long status, std::string_view body, const std::string& what,
               const S3Config& config) {
  std::string code = xml_element(body, "Code");
  std::string message = xml_element(body, "Message");
  std::string detail = what + ": HTTP " + std::to_string(status) +
                       (code.empty() ? "" : " " + code) +
                       (message.empty() ? "" : " (" + message + ")");
  if (code == "RequestTimeTooSkewed") {
    return Error{Errc::clock_skew,
                 detail +
                     ": this machine's clock differs from the endpoint's by more than the 15 "
                     "minutes a signature allows; set the clock right (timedatectl, chrony)"};
  }
  if (code == "InvalidAccessKeyId" || code == "SignatureDoesNotMatch" || code == "InvalidToken" ||
      code == "ExpiredToken" || code == "AccessDenied" || (status == 403 && code.empty()) ||
      status == 401) {
    return Error{Errc::permission_denied,
                 detail + ": the endpoint refused the credentials from " + config.credentials_from +
                     "; check the access key and secret (and that they may use this bucket)"};
  }
  if (code == "NoSuchBucket") {
    return Error{Errc::not_found, detail + ": no such bucket at " + config.endpoint +
                                      "; create it (aws s3 mb s3://BUCKET) or check its name"};
  }
  if (status == 404) return Error{Errc::not_found, detail};
  if (status == 412) return Error{Errc::already_exists, detail};
  if (status == 411 || status == 501) return Error{Errc::unsupported, detail};
  if (status >= 500) return Error{Errc::io_error, detail};
  return Error{Errc::io_error, detail};
}

std::string s3_query_encode(std::string_view value) {
  static const char* kHex = "0123456789ABCDEF";
  std::string out;
  for (char ch : value) {
    auto c = static_cast<unsigned char>(ch);
    bool unreserved = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
                      c == '-' || c == '.' || c == '_' || c == '~';
    if (unreserved) {
      out += ch;
    } else {
      out += '%';
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  return out;
}

S3ListPage s3_parse_list(std::string_view xml) {
  S3ListPage page;
  std::size_t pos = 0;
  while (true) {
    std::size_t contents = xml.find("<Contents>", pos);
    if (contents == std::string_view::npos) break;
    std::size_t end = xml.find("</Contents>", contents);
    if (end == std::string_view::npos) break;
    std::string_view entry = xml.substr(contents, end - contents);
    S3ObjectInfo info;
    info.key = xml_element(entry, "Key");
    info.size = std::strtoull(xml_element(entry, "Size").c_str(), nullptr, 10);
    info.modified_unix = s3_parse_time(xml_element(entry, "LastModified")).value_or(0);
    page.objects.push_back(std::move(info));
    pos = end;
  }
  if (xml_element(xml, "IsTruncated") == "true") {
    page.next_token = xml_element(xml, "NextContinuationToken");
  }
  return page;
}

std::optional<std::int64_t> s3_parse_time(std::string_view text) {
  std::tm tm{};
  std::string s(text);
  const char* end = ::strptime(s.c_str(), "%Y-%m-%dT%H:%M:%S", &tm);
  if (end == nullptr) end = ::strptime(s.c_str(), "%a, %d %b %Y %H:%M:%S GMT", &tm);
  if (end == nullptr) return std::nullopt;
  return static_cast<std::int64_t>(::timegm(&tm));
}

namespace {

std::string_view as_text(const std::vector<std::byte>& bytes) {
  return {reinterpret_cast<const char*>(bytes.data()), bytes.size()};
}

}  // namespace

Result<std::vector<std::byte>> S3Client::get_object(const std::string& key,
                                                    std::uint64_t max_bytes) {
  GCR_TRY_ASSIGN(S3Versioned v, get_object_versioned(key, max_bytes));
  return std::move(v.bytes);
}

Result<S3Versioned> S3Client::get_object_versioned(const std::string& key,
                                                   std::uint64_t max_bytes) {
  Request r;
  r.method = "GET";
  r.key = key;
  r.max_bytes = max_bytes;
  GCR_TRY_ASSIGN(Response resp, perform(r));
  if (resp.status != 200) {
    return s3_error(resp.status, as_text(resp.body), "GET s3://" + bucket_ + "/" + key, config_);
  }
  return S3Versioned{std::move(resp.body), std::move(resp.etag)};
}

Status S3Client::get_object_range(const std::string& key, std::uint64_t offset,
                                  std::span<std::byte> out) {
  if (out.empty()) return ok();
  Request r;
  r.method = "GET";
  r.key = key;
  r.range_offset = offset;
  r.range_bytes = out.size();
  r.into = out;
  GCR_TRY_ASSIGN(Response resp, perform(r));
  if (resp.status != 206) {
    return s3_error(resp.status, as_text(resp.body),
                    "GET s3://" + bucket_ + "/" + key + " bytes " + std::to_string(offset) + "+" +
                        std::to_string(out.size()),
                    config_);
  }
  return ok();
}

Status S3Client::put_object(const std::string& key, std::span<const std::byte> body,
                            bool if_none_match) {
  const std::span<const std::byte> whole[] = {body};
  return put_object_parts(key, whole, if_none_match);
}

Status S3Client::put_object_parts(const std::string& key,
                                  std::span<const std::span<const std::byte>> parts,
                                  bool if_none_match) {
  Request r;
  r.if_none_match = if_none_match;
  return put(r, key, parts);
}

Status S3Client::put_object_if_match(const std::string& key, std::span<const std::byte> body,
                                     const std::string& if_match) {
  Request r;
  r.if_match = if_match;
  const std::span<const std::byte> whole[] = {body};
  return put(r, key, whole);
}

Status S3Client::put(Request& r, const std::string& key,
                     std::span<const std::span<const std::byte>> body) {
  r.method = "PUT";
  r.key = key;
  r.body = body;
  r.body_bytes = 0;
  for (std::span<const std::byte> p : body) r.body_bytes += p.size();
  r.max_bytes = 1 << 20;
  GCR_TRY_ASSIGN(Response resp, perform(r));
  if (resp.status != 200 && resp.status != 201 && resp.status != 204) {
    return s3_error(resp.status, as_text(resp.body), "PUT s3://" + bucket_ + "/" + key, config_);
  }
  return ok();
}

Status S3Client::delete_object(const std::string& key) {
  Request r;
  r.method = "DELETE";
  r.key = key;
  r.max_bytes = 1 << 20;
  GCR_TRY_ASSIGN(Response resp, perform(r));
  if (resp.status != 200 && resp.status != 204 && resp.status != 404) {
    return s3_error(resp.status, as_text(resp.body), "DELETE s3://" + bucket_ + "/" + key, config_);
  }
  return ok();
}

Result<S3Listing> S3Client::list_objects(const std::string& prefix) {
  S3Listing listing;
  std::string token;
  for (int page = 0; page < 100000; ++page) {
    Request r;
    r.method = "GET";
    r.key = "";
    // Canonical order: continuation-token < list-type < prefix.
    if (!token.empty()) r.query = "continuation-token=" + s3_query_encode(token) + "&";
    r.query += "list-type=2&prefix=" + s3_query_encode(prefix);
    r.max_bytes = 64u << 20;
    GCR_TRY_ASSIGN(Response resp, perform(r));
    if (resp.status != 200) {
      return s3_error(resp.status, as_text(resp.body), "LIST s3://" + bucket_ + "/" + prefix,
                      config_);
    }
    if (page == 0) {
      auto now = s3_parse_time(resp.date);
      if (!now) {
        return make_error(Errc::protocol, "LIST s3://" + bucket_ + "/" + prefix +
                                              ": the response has no Date header gcr can read ('" +
                                              resp.date.substr(0, 64) + "')");
      }
      listing.now_unix = *now;
    }
    S3ListPage p = s3_parse_list(as_text(resp.body));
    for (auto& o : p.objects) listing.objects.push_back(std::move(o));
    if (p.next_token.empty()) return listing;
    token = p.next_token;
  }
  return make_error(Errc::io_error, "LIST s3://" + bucket_ + "/" + prefix + ": too many pages");
}

}  // namespace gcr::store
