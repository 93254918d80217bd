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
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "gcr/result.h"
#include "store/s3_config.h"

namespace gcr::store {

class CurlEasy;

struct S3Versioned {
  std::vector<std::byte> bytes;
  std::string etag;  // unquoted
};

struct S3ObjectInfo {
  std::string key;
  std::uint64_t size = 0;
  std::int64_t modified_unix = 0;  // LastModified, seconds since the epoch (endpoint's clock)
};

struct S3Listing {
  std::vector<S3ObjectInfo> objects;
  std::int64_t now_unix = 0;  // the endpoint's clock when it listed
};

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
  // The whole object and its ETag (unquoted), for a later conditional PUT.
  Result<S3Versioned> get_object_versioned(const std::string& key, std::uint64_t max_bytes);
  // Exactly out.size() bytes from offset.
  Status get_object_range(const std::string& key, std::uint64_t offset, std::span<std::byte> out);
  // if_none_match: the write happens only if the key does not exist, else already_exists.
  Status put_object(const std::string& key, std::span<const std::byte> body, bool if_none_match);
  // As put_object, the body the concatenation of `parts`, sent from where each is.
  Status put_object_parts(const std::string& key, std::span<const std::span<const std::byte>> parts,
                          bool if_none_match);
  // The write happens only if the object's ETag is if_match (If-Match; RGW wants it unquoted),
  // else already_exists (412).
  Status put_object_if_match(const std::string& key, std::span<const std::byte> body,
                             const std::string& if_match);
  // Unconditional: RGW ignores If-Match on DELETE (measured, Ceph 16).
  Status delete_object(const std::string& key);
  // Every object whose key starts with prefix (ListObjectsV2, all pages), and the endpoint's
  // clock (the Date of the first page), against which their LastModified can be aged.
  Result<S3Listing> list_objects(const std::string& prefix);

 private:
  struct Request;
  struct Response;
  Result<Response> perform(Request& request);
  Status put(Request& request, const std::string& key,
             std::span<const std::span<const std::byte>> body);
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

// The objects, and the continuation token when the listing is truncated, of a ListObjectsV2 page.
struct S3ListPage {
  std::vector<S3ObjectInfo> objects;
  std::string next_token;  // empty when this was the last page
};
S3ListPage s3_parse_list(std::string_view xml);

// Seconds since the epoch of an ISO 8601 UTC time as S3 lists it ("2026-12-02T06:19:18.773Z"),
// or of an HTTP date ("Wed, 02 Dec 2026 06:19:18 GMT"); nullopt when it is neither.
std::optional<std::int64_t> s3_parse_time(std::string_view text);

}  // namespace gcr::store
