// S3Config: see s3_config.h. The two AWS files are INI: "[section]" lines and "key = value" lines;
// '#' and ';' start comments.
#include "store/s3_config.h"

#include <fstream>
#include <map>

namespace gcr::store {
namespace {

std::string trim(std::string s) {
  auto b = s.find_first_not_of(" \t\r");
  auto e = s.find_last_not_of(" \t\r");
  return b == std::string::npos ? std::string() : s.substr(b, e - b + 1);
}

// section -> key -> value; an unreadable file is empty.
std::map<std::string, std::map<std::string, std::string>> read_ini(const std::string& path) {
  std::map<std::string, std::map<std::string, std::string>> out;
  std::ifstream in(path);
  std::string line, section;
  while (std::getline(in, line)) {
    line = trim(line);
    if (line.empty() || line[0] == '#' || line[0] == ';') continue;
    if (line.front() == '[' && line.back() == ']') {
      section = trim(line.substr(1, line.size() - 2));
      continue;
    }
    auto eq = line.find('=');
    if (eq == std::string::npos) continue;
    out[section][trim(line.substr(0, eq))] = trim(line.substr(eq + 1));
  }
  return out;
}

std::string env_or(const GetEnv& getenv, const char* name, const std::string& fallback = {}) {
  const char* v = getenv(name);
  return v != nullptr && *v != '\0' ? std::string(v) : fallback;
}

unsigned env_count(const GetEnv& getenv, const char* name, unsigned fallback, unsigned max) {
  std::string v = env_or(getenv, name);
  if (v.empty() || v.find_first_not_of("0123456789") != std::string::npos || v.size() > 6) {
    return fallback;
  }
  unsigned n = static_cast<unsigned>(std::stoul(v));
  return n == 0 ? 1 : (n > max ? max : n);
}

}  // namespace

Result<S3Config> load_s3_config(const GetEnv& getenv) {
  S3Config c;
  std::string home = env_or(getenv, "HOME", "/");
  std::string profile = env_or(getenv, "AWS_PROFILE", "default");
  std::string config_file = env_or(getenv, "AWS_CONFIG_FILE", home + "/.aws/config");
  std::string creds_file =
      env_or(getenv, "AWS_SHARED_CREDENTIALS_FILE", home + "/.aws/credentials");

  auto config = read_ini(config_file);
  const auto& conf = config[profile == "default" ? "default" : "profile " + profile];
  auto conf_value = [&](const char* key) {
    auto it = conf.find(key);
    return it == conf.end() ? std::string() : it->second;
  };

  c.region =
      env_or(getenv, "AWS_REGION", env_or(getenv, "AWS_DEFAULT_REGION", conf_value("region")));
  if (c.region.empty()) c.region = "us-east-1";
  c.endpoint = env_or(getenv, "AWS_ENDPOINT_URL_S3",
                      env_or(getenv, "AWS_ENDPOINT_URL", conf_value("endpoint_url")));
  if (c.endpoint.empty()) c.endpoint = "https://s3." + c.region + ".amazonaws.com";
  while (!c.endpoint.empty() && c.endpoint.back() == '/') c.endpoint.pop_back();
  if (c.endpoint.find("://") == std::string::npos) c.endpoint = "https://" + c.endpoint;

  c.access_key = env_or(getenv, "AWS_ACCESS_KEY_ID");
  c.secret_key = env_or(getenv, "AWS_SECRET_ACCESS_KEY");
  if (!c.access_key.empty() && !c.secret_key.empty()) {
    c.session_token = env_or(getenv, "AWS_SESSION_TOKEN");
    c.credentials_from = "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY";
  } else {
    auto creds = read_ini(creds_file);
    const auto& p = creds[profile];
    auto value = [&](const char* key) {
      auto it = p.find(key);
      return it == p.end() ? std::string() : it->second;
    };
    c.access_key = value("aws_access_key_id");
    c.secret_key = value("aws_secret_access_key");
    c.session_token = value("aws_session_token");
    c.credentials_from = "profile '" + profile + "' in " + creds_file;
  }
  if (c.access_key.empty() || c.secret_key.empty()) {
    return make_error(Errc::permission_denied,
                      "no S3 credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or "
                      "give profile '" +
                          profile + "' aws_access_key_id and aws_secret_access_key in " +
                          creds_file + " (AWS_PROFILE chooses the profile)");
  }
  c.attempts = env_count(getenv, "GCR_S3_ATTEMPTS", c.attempts, 100);
  c.parallelism = env_count(getenv, "GCR_S3_PARALLEL", c.parallelism, 64);
  return c;
}

}  // namespace gcr::store
