// S3Client: the few S3 requests a store needs (GET, ranged GET, PUT, conditional PUT, DELETE,
// ListObjectsV2) against one bucket, over libcurl, which signs each request itself (SigV4,
// CURLOPT_AWS_SIGV4): gcr holds no signing code. Facts this relies on, measured against Ceph RGW
// and curl 7.88 (docs/image-format.md §8):
//   - curl 7.88 does not send x-amz-content-sha256, and RGW rejects the signature without it:
//     every request carries "UNSIGNED-PAYLOAD";
//   - the query string must be given canonical (sorted, percent-encoded) or the signature differs;
//   - an upload needs its size (a chunked upload gets 411), and If-None-Match: * is honoured on a
//     plain PUT only (not on multipart completion), so a commit is one PUT.
// Failed requests are retried with exponential backoff (5xx, 429, resets, timeouts, refused
// connections) up to S3Config::attempts; what is left becomes an Error a user can act on: bad
// credentials (permission_denied), no such bucket (not_found), endpoint down (unreachable), clock
// skew (clock_skew). Easy handles are pooled, so connections are reused. Thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "gcr/result.h"
#include "store/s3_config.h"

namespace gcr::store {

class CurlEasy;

class S3Client {
 public:
  S3Client(S3Config config, std::string bucket);
  ~S3Client();
  S3Client(const S3Client&) = delete;
  S3Client& operator=(const S3Client&) = delete;

  const S3Config& config() const { return config_; }
  const std::string& bucket() const { return bucket_; }

  // The whole object; not_found when it (or the bucket) does not exist.
  Result<std::vector<std::byte>> get_object(const std::string& key, std::uint64_t max_bytes);
  // Exactly out.size() bytes from offset.
  Status get_object_range(const std::string& key, std::uint64_t offset, std::span<std::byte> out);
  // if_none_match: the write happens only if the key does not exist, else already_exists.
  Status put_object(const std::string& key, std::span<const std::byte> body, bool if_none_match);
  Status delete_object(const std::string& key);
  // Every key starting with prefix (ListObjectsV2, all pages).
  Result<std::vector<std::string>> list_keys(const std::string& prefix);

 private:
  struct Request;
  struct Response;
  Result<Response> perform(Request& request);
  Result<Response> perform_once(Request& request, CurlEasy& easy);
  std::unique_ptr<CurlEasy> take_handle();
  void return_handle(std::unique_ptr<CurlEasy> easy);

  S3Config config_;
  std::string bucket_;
  std::mutex pool_mu_;
  std::vector<std::unique_ptr<CurlEasy>> pool_;
};

// What an S3 error response means to the user (exposed for tests): `status` the HTTP status,
// `body` the response (an XML <Error> with <Code>), `what` the request ("GET s3://b/k").
Error s3_error(long status, std::string_view body, const std::string& what, const S3Config& config);

// RFC 3986 percent-encoding of a query value (unreserved characters kept, '/' encoded).
std::string s3_query_encode(std::string_view value);

// The <Key>s, and the continuation token when the listing is truncated, of a ListObjectsV2 page.
struct S3ListPage {
  std::vector<std::string> keys;
  std::string next_token;  // empty when this was the last page
};
S3ListPage s3_parse_list(std::string_view xml);

}  // namespace gcr::store
