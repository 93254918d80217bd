// The S3 pieces that need no endpoint: where configuration comes from, how error responses map to
// what a user can act on, query encoding and listing pages. (Against a real endpoint:
// tests/integration/s3.)
#include <catch2/catch.hpp>

#include <fstream>
#include <map>

#include "gcr/remote_cache.h"
#include "store/s3_client.h"
#include "store/s3_config.h"
#include "test_util.h"

using namespace gcr;
using namespace gcr::store;

namespace {

GetEnv env_of(std::map<std::string, std::string>& vars) {
  return [&vars](const char* name) -> const char* {
    auto it = vars.find(name);
    return it == vars.end() ? nullptr : it->second.c_str();
  };
}

}  // namespace

TEST_CASE("S3 settings come from the environment first, then the profile files", "[s3]") {
  ScratchDir dir;
  std::filesystem::create_directories(dir.path() / ".aws");
  std::ofstream(dir.path() / ".aws" / "config")
      << "[default]\nregion = eu-west-1\n[profile lab]\nregion = lab-1\n"
         "endpoint_url = http://rgw.lab:8000/\n";
  std::ofstream(dir.path() / ".aws" / "credentials")
      << "# comment\n[default]\naws_access_key_id = AKDEF\naws_secret_access_key = sdef\n"
         "[lab]\naws_access_key_id=AKLAB\naws_secret_access_key=slab\n";
  std::map<std::string, std::string> vars{{"HOME", dir.path().string()}};

  auto c = load_s3_config(env_of(vars));
  REQUIRE(c);
  CHECK(c->access_key == "AKDEF");
  CHECK(c->region == "eu-west-1");
  CHECK(c->endpoint == "https://s3.eu-west-1.amazonaws.com");

  vars["AWS_PROFILE"] = "lab";
  c = load_s3_config(env_of(vars));
  REQUIRE(c);
  CHECK(c->access_key == "AKLAB");
  CHECK(c->secret_key == "slab");
  CHECK(c->region == "lab-1");
  CHECK(c->endpoint == "http://rgw.lab:8000");
  CHECK_THAT(c->credentials_from, Catch::Contains("'lab'"));

  vars["AWS_ACCESS_KEY_ID"] = "AKENV";
  vars["AWS_SECRET_ACCESS_KEY"] = "senv";
  vars["AWS_ENDPOINT_URL"] = "http://127.0.0.1:7480";
  vars["AWS_REGION"] = "r1";
  vars["GCR_S3_ATTEMPTS"] = "2";
  c = load_s3_config(env_of(vars));
  REQUIRE(c);
  CHECK(c->access_key == "AKENV");
  CHECK(c->endpoint == "http://127.0.0.1:7480");
  CHECK(c->region == "r1");
  CHECK(c->attempts == 2);
}

TEST_CASE("no credentials anywhere is an error naming where to put them", "[s3]") {
  ScratchDir dir;
  std::map<std::string, std::string> vars{{"HOME", dir.path().string()}};
  auto c = load_s3_config(env_of(vars));
  REQUIRE_FALSE(c);
  CHECK(c.error().code == Errc::permission_denied);
  CHECK_THAT(c.error().message, Catch::Contains("AWS_ACCESS_KEY_ID"));
}

TEST_CASE("S3 error responses become errors a user can act on", "[s3]") {
  S3Config c;
  c.endpoint = "http://e";
  c.credentials_from = "AWS_ACCESS_KEY_ID";
  auto body = [](const char* code) {
    return std::string("<?xml version=\"1.0\"?><Error><Code>") + code +
           "</Code><Message>m</Message></Error>";
  };
  CHECK(s3_error(403, body("SignatureDoesNotMatch"), "GET x", c).code == Errc::permission_denied);
  CHECK(s3_error(403, body("InvalidAccessKeyId"), "GET x", c).code == Errc::permission_denied);
  CHECK(s3_error(403, body("RequestTimeTooSkewed"), "GET x", c).code == Errc::clock_skew);
  CHECK(s3_error(404, body("NoSuchBucket"), "GET x", c).code == Errc::not_found);
  CHECK(s3_error(404, body("NoSuchKey"), "GET x", c).code == Errc::not_found);
  CHECK(s3_error(412, body("PreconditionFailed"), "PUT x", c).code == Errc::already_exists);
  CHECK(s3_error(503, body("SlowDown"), "GET x", c).code == Errc::io_error);
  auto e = s3_error(403, body("SignatureDoesNotMatch"), "GET x", c);
  CHECK_THAT(e.message, Catch::Contains("AWS_ACCESS_KEY_ID") && Catch::Contains("GET x"));
}

TEST_CASE("query values are percent-encoded as SigV4 canonical form wants", "[s3]") {
  CHECK(s3_query_encode("a/b c") == "a%2Fb%20c");
  CHECK(s3_query_encode("A-z_0.9~") == "A-z_0.9~");
  CHECK(s3_query_encode("x=+") == "x%3D%2B");
}

TEST_CASE("a ListObjectsV2 page gives its objects and the next token", "[s3]") {
  std::string xml =
      "<ListBucketResult><IsTruncated>true</IsTruncated><Contents><Key>p/packs/a.idx</Key>"
      "<LastModified>2026-12-02T06:19:18.773Z</LastModified><Size>12345678901</Size></Contents>"
      "<Contents><Key>p/a&amp;b</Key></Contents>"
      "<NextContinuationToken>tok+/=</NextContinuationToken></ListBucketResult>";
  auto page = s3_parse_list(xml);
  REQUIRE(page.objects.size() == 2);
  CHECK(page.objects[0].key == "p/packs/a.idx");
  CHECK(page.objects[0].size == 12345678901ull);
  CHECK(page.objects[0].modified_unix == 1796192358);
  CHECK(page.objects[1].key == "p/a&b");
  CHECK(page.objects[1].size == 0);
  CHECK(page.next_token == "tok+/=");
  auto last = s3_parse_list(
      "<ListBucketResult><IsTruncated>false</IsTruncated>"
      "<NextContinuationToken>x</NextContinuationToken></ListBucketResult>");
  CHECK(last.objects.empty());
  CHECK(last.next_token.empty());
}

TEST_CASE("S3's two ways of writing a time read the same", "[s3]") {
  CHECK(s3_parse_time("2026-12-02T06:19:18.773Z") == 1796192358);
  CHECK(s3_parse_time("Wed, 02 Dec 2026 06:19:18 GMT") == 1796192358);
  CHECK(s3_parse_time("1970-01-01T00:00:00Z") == 0);
  CHECK(!s3_parse_time("yesterday"));
  CHECK(!s3_parse_time(""));
}
