// Note [Transactions] (transaction.h).
#include "transaction.h"

#include <algorithm>

namespace gcr::gcrd {

Transaction::Transaction(std::string what, Clock::duration limit,
                         std::function<Clock::time_point()> now)
    : what_(std::move(what)), now_(std::move(now)) {
  const Clock::time_point start = now_();
  deadline_ = limit >= Clock::time_point::max() - start ? Clock::time_point::max() : start + limit;
}

Transaction::~Transaction() {
  if (!finished_) abort();
}

Transaction::Clock::duration Transaction::time_left() const {
  const Clock::time_point t = now_();
  return t >= deadline_ ? Clock::duration::zero() : deadline_ - t;
}

Status Transaction::run(const std::string& name, const std::function<Status()>& phase) {
  if (finished_) return Error{Errc::internal, what_ + ": phase " + name + " after the end"};
  if (time_left() == Clock::duration::zero()) {
    journal_.push_back("timeout before " + name);
    abort();
    return Error{Errc::timeout, what_ + " ran out of time before its " + name +
                                    " phase; everything done so far was undone"};
  }
  phase_ = name;
  journal_.push_back("begin " + name);
  if (observer_) observer_(name);
  Status s = phase();
  if (!s) {
    journal_.push_back("failed " + name + ": " + s.error().message);
    abort();
  }
  return s;
}

void Transaction::on_undo(std::string what, Undo undo) {
  undos_.push_back({std::move(what), std::move(undo)});
}

std::size_t Transaction::forget_undo(const std::string& what) {
  auto gone =
      std::remove_if(undos_.begin(), undos_.end(), [&](const Step& s) { return s.what == what; });
  std::size_t n = static_cast<std::size_t>(undos_.end() - gone);
  undos_.erase(gone, undos_.end());
  return n;
}

void Transaction::abort() {
  if (finished_) return;
  finished_ = true;
  while (!undos_.empty()) {
    Step step = std::move(undos_.back());
    undos_.pop_back();
    journal_.push_back("undo " + step.what);
    if (step.undo) step.undo();
  }
  phase_ = "aborted";
  if (observer_) observer_(phase_);
}

void Transaction::commit() {
  if (finished_) return;
  finished_ = true;
  undos_.clear();
  journal_.push_back("commit");
  phase_ = "committed";
  if (observer_) observer_(phase_);
}

Status TwoPhaseCommit::run() {
  std::size_t asked = 0;
  Status failed = ok();
  std::string who;
  for (; asked < parts_.size(); ++asked) {
    journal_.push_back("prepare " + parts_[asked]->name());
    if (Status s = parts_[asked]->prepare(); !s) {
      failed = std::move(s);
      who = parts_[asked]->name();
      ++asked;
      break;
    }
  }
  if (!failed) {
    for (std::size_t i = asked; i-- > 0;) {
      journal_.push_back("abort " + parts_[i]->name());
      parts_[i]->abort();
    }
    return std::move(failed).context(who + " could not prepare; every part was aborted");
  }
  std::vector<std::string> committed;
  for (std::size_t i = 0; i < parts_.size(); ++i) {
    journal_.push_back("commit " + parts_[i]->name());
    if (Status s = parts_[i]->commit(); !s) {
      for (std::size_t j = parts_.size(); j-- > i + 1;) {
        journal_.push_back("abort " + parts_[j]->name());
        parts_[j]->abort();
      }
      std::string done;
      for (const std::string& c : committed) done += (done.empty() ? "" : ", ") + c;
      return std::move(s).context(
          parts_[i]->name() + " failed to commit" +
          (done.empty() ? std::string() : " after " + done + " had committed") +
          "; the parts not yet committed were aborted");
    }
    committed.push_back(parts_[i]->name());
  }
  return ok();
}

}  // namespace gcr::gcrd
