// The Compute panel's routes: backends, constraints (of the running server, saved on request),
// recent placement records, operations waiting for consent, and the settings file.
#include <algorithm>
#include <iterator>

#include <httplib.h>

#include "compute/settings.h"
#include "server/api.h"
#include "server/http_util.h"

namespace tensormorph::server {
namespace {

using json = nlohmann::ordered_json;

json constraints_json(const compute::Constraints& c) {
  return {{"mode", c.automatic() ? "auto" : c.to_string()}, {"prefer", c.prefer}, {"never", c.never}, {"only", c.only}};
}

Result<std::vector<std::string>> names(const json& body, const char* key) {
  std::vector<std::string> out;
  if (!body.contains(key)) return out;
  if (!body[key].is_array()) return Status::InvalidArgument(std::string(key) + " must be an array of backend names");
  for (const auto& v : body[key]) {
    if (!v.is_string() || v.get<std::string>().empty()) return Status::InvalidArgument(std::string(key) + " holds a non-name");
    out.push_back(v.get<std::string>());
  }
  return out;
}

// "persist": absent (false) or a boolean.
Result<bool> persist_flag(const json& body) {
  if (!body.contains("persist")) return false;
  if (!body["persist"].is_boolean()) return Status::InvalidArgument("persist must be true or false");
  return body["persist"].get<bool>();
}

// The keys the viewer may change; they apply to the running server at once.
constexpr const char* kRunningKeys[] = {"compute", "compute.memory_budget", "compute.time_budget", "compute.device_cache",
                                        "compute.split"};

}  // namespace

void ApiContext::note_consent_request(json request) {
  std::lock_guard lock(consent_mutex_);
  request["sequence"] = ++consent_sequence_;
  consent_requests_.push_back(std::move(request));
  while (consent_requests_.size() > 32) consent_requests_.pop_front();
}

void ApiContext::register_compute_routes(httplib::Server& http) {
  http.Get("/api/compute", [this](const httplib::Request& req, httplib::Response& res) {
    auto since = uint_param(req, "since", 0, UINT64_MAX);
    if (!since.ok()) return reply_error(res, since.status());
    json backends = json::array();
    for (const auto& b : session_->backends()) {
      backends.push_back({{"name", b->name()}, {"device", b->traits().device_name},
                          {"host_visible", b->host_visible()}, {"lost", b->lost_reason()}});
    }
    json reports = json::array();
    for (const auto& r : session_->load_reports()) reports.push_back({{"name", r.name}, {"library", r.library_path}, {"available", r.available}, {"detail", r.detail}});
    json records = json::array();
    const auto recent = *since > 0 ? scheduler().log().since(*since) : scheduler().log().recent(100);
    for (const auto& r : recent) records.push_back(r.to_json());
    json consent = json::array();
    uint64_t consent_sequence = 0;
    {
      std::lock_guard lock(consent_mutex_);
      for (const auto& c : consent_requests_) consent.push_back(c);
      consent_sequence = consent_sequence_;
    }
    reply_json(res, {{"constraints", constraints_json(scheduler().constraints())}, {"backends", backends},
                     {"load_reports", reports}, {"records", records}, {"consent_requests", consent},
                     {"consent_sequence", consent_sequence}, {"summary", scheduler().log().summary().to_json()},
                     {"settings_file", compute::settings_path().string()}});
  });

  // Replaces the running server's constraints; the settings file changes only with "persist": true.
  http.Post("/api/compute", [this](const httplib::Request& req, httplib::Response& res) {
    const json body = json::parse(req.body, nullptr, false);
    if (body.is_discarded() || !body.is_object()) return reply_error(res, Status::InvalidArgument("body is not a JSON object"));
    auto persist = persist_flag(body);
    if (!persist.ok()) return reply_error(res, persist.status());
    compute::Constraints c;
    if (body.value("mode", "") != "auto") {
      auto prefer = names(body, "prefer"), never = names(body, "never"), only = names(body, "only");
      for (const auto* r : {&prefer, &never, &only}) {
        if (!r->ok()) return reply_error(res, r->status());
      }
      c = {*prefer, *never, *only};
    }
    std::lock_guard lock(settings_mutex_);
    if (*persist) {
      auto settings = compute::load_settings(compute::settings_path());
      if (!settings.ok()) return reply_error(res, settings.status());
      settings->constraints = c;
      if (Status saved = compute::save_settings(compute::settings_path(), *settings); !saved.ok()) {
        return reply_error(res, saved);
      }
    }
    scheduler().set_constraints(c);
    running_.constraints = c;
    reply_json(res, {{"constraints", constraints_json(c)}, {"persisted", *persist}});
  });

  // The settings file's keys, and what the running server uses (which may differ until saved).
  http.Get("/api/settings", [this](const httplib::Request&, httplib::Response& res) {
    std::lock_guard lock(settings_mutex_);
    auto settings = compute::load_settings(compute::settings_path());
    if (!settings.ok()) return reply_error(res, settings.status());
    json values = json::object(), running = json::object();
    for (const char* key : {"compute", "compute.memory_budget", "compute.time_budget", "compute.device_cache", "compute.split",
                            "plugins.path"}) {
      auto v = compute::get_setting(*settings, key);
      values[key] = v.ok() ? *v : "";
    }
    for (const char* key : kRunningKeys) {
      auto v = compute::get_setting(running_, key);
      running[key] = v.ok() ? *v : "";
    }
    reply_json(res, {{"file", compute::settings_path().string()}, {"values", values}, {"running", running},
                     {"read_only", json::array({"plugins.path"})}});
  });

  // Sets one compute key on the running server; the settings file changes only with "persist": true.
  // Nothing that loads code (plugins.path) can be set here: a page that got a request through
  // would choose the libraries the next command loads.
  http.Post("/api/settings", [this](const httplib::Request& req, httplib::Response& res) {
    const json body = json::parse(req.body, nullptr, false);
    if (body.is_discarded() || !body.is_object() || !body.contains("key") || !body["key"].is_string() ||
        !body.contains("value") || !body["value"].is_string()) {
      return reply_error(res, Status::InvalidArgument("body must be {\"key\": string, \"value\": string[, \"persist\": bool]}"));
    }
    auto persist = persist_flag(body);
    if (!persist.ok()) return reply_error(res, persist.status());
    const std::string key = body["key"], value = body["value"];
    if (std::find(std::begin(kRunningKeys), std::end(kRunningKeys), key) == std::end(kRunningKeys)) {
      if (key == "plugins.path") {
        return reply_json(res, {{"error", "plugins.path cannot be set over HTTP (it loads code); use `tensormorph config set plugins.path DIRS`"},
                                {"code", "FORBIDDEN"}}, 403);
      }
      return reply_error(res, Status::InvalidArgument("unknown setting '" + key.substr(0, 80) + "'; the viewer sets compute, "
                                                      "compute.memory_budget, compute.time_budget, compute.device_cache and compute.split"));
    }
    std::lock_guard lock(settings_mutex_);
    compute::Settings next = running_;
    if (Status set = compute::set_setting(next, key, value); !set.ok()) return reply_error(res, set);
    if (*persist) {
      auto settings = compute::load_settings(compute::settings_path());
      if (!settings.ok()) return reply_error(res, settings.status());
      if (Status set = compute::set_setting(*settings, key, value); !set.ok()) return reply_error(res, set);
      if (Status saved = compute::save_settings(compute::settings_path(), *settings); !saved.ok()) {
        return reply_error(res, saved);
      }
    }
    if (key == "compute") {
      scheduler().set_constraints(next.constraints);
    } else if (key == "compute.memory_budget") {
      scheduler().set_memory_budget(next.memory_budget_bytes);
    } else if (key == "compute.time_budget") {
      scheduler().set_time_budget(next.time_budget_seconds * 1e9);
    } else if (key == "compute.split") {
      compute::SplitPolicy policy;
      policy.enabled = next.split;
      scheduler().set_split_policy(policy);
    } else {
      scheduler().set_device_cache_budget(next.device_cache_bytes);
    }
    running_ = std::move(next);
    reply_json(res, {{"key", key}, {"value", value}, {"applies", "now"}, {"persisted", *persist}});
  });
}

}  // namespace tensormorph::server
