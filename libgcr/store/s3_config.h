// S3Config: where an S3 store's endpoint, region and credentials come from, in the order the AWS
// tools use, so that a user's existing set-up works unchanged:
//   endpoint     AWS_ENDPOINT_URL_S3, AWS_ENDPOINT_URL, the profile's endpoint_url (config),
//                else https://s3.<region>.amazonaws.com
//   region       AWS_REGION, AWS_DEFAULT_REGION, the profile's region (config), else us-east-1
//   credentials  AWS_ACCESS_KEY_ID + AWS_SECRET_ACCESS_KEY (+ AWS_SESSION_TOKEN), else the
//                profile in AWS_SHARED_CREDENTIALS_FILE (~/.aws/credentials)
//   profile      AWS_PROFILE, else "default"; config file AWS_CONFIG_FILE (~/.aws/config), whose
//                sections are [default] and [profile NAME]
// Requests go path-style (endpoint/bucket/key), which every S3-compatible service accepts.
#pragma once

#include <functional>
#include <string>

#include "gcr/result.h"

namespace gcr::store {

struct S3Config {
  std::string endpoint;  // "http://127.0.0.1:8000", no trailing '/'
  std::string region;
  std::string access_key, secret_key, session_token;
  std::string credentials_from;  // "AWS_ACCESS_KEY_ID", "profile default in /root/.aws/credentials"
  unsigned attempts = 6;         // GCR_S3_ATTEMPTS: tries per request before giving up (>= 1)
  unsigned parallelism = 8;      // GCR_S3_PARALLEL: requests in flight at once
};

// getenv, or a stand-in for tests.
using GetEnv = std::function<const char*(const char*)>;

// Resolves the configuration; fails (permission_denied) when no credentials are found, naming
// where it looked.
Result<S3Config> load_s3_config(const GetEnv& getenv);

}  // namespace gcr::store
