/*
 * graphs/policy.h — when a specialization replays its CUDA graph recordings and when it asks the recorder for a
 * new one (its SpecGraphs object holds one GraphPolicy, spec_graphs.h; recording and replaying: graphs/replay.cpp,
 * graphs/recorder.py).
 *
 * The first recording is made at the kRecordAtHit-th hit. At most kMaxRecordings recordings are kept (symbolic
 * sizes, e.g. batch 1 and 8, or a new KV cache per generate() each need their own); a new one replaces the least
 * recently replayed. A miss costs a partial replay-mode run per recording before the direct one, so when hits miss
 * every recording more often than kGraphMissAllowance beyond their replays, replay pauses. A call no recording fits
 * is recorded at once while the recordings made so far replay; after a recording that failed or never replayed, the
 * next waits a backoff that doubles from kFirstBackoff hits to kMaxBackoff while they keep failing, and a pause
 * lasts such a backoff too. Nothing stops for good on a transient cause (a Triton variant compiling at the moment
 * of a recording, inputs that were changing for a while); only the recorder says "never" (RecordOutcome.never).
 */
#ifndef TRIDENT_GRAPH_POLICY_H
#define TRIDENT_GRAPH_POLICY_H

#include <algorithm>
#include <cstdint>

#include "trident_runtime.h"

namespace trident::graphs {

constexpr uint64_t kRecordAtHit = TRIDENT_GRAPH_RECORD_AT_HIT;
constexpr int64_t kMaxRecordings = TRIDENT_GRAPH_MAX_RECORDINGS;
constexpr uint64_t kGraphMissAllowance = 16;
constexpr uint64_t kFirstBackoff = 16;
constexpr uint64_t kMaxBackoff = 4096;

// One specialization's graph replay state over its hits.
struct GraphPolicy {
  uint64_t replays = 0, misses = 0;  // since the specialization was added
  uint32_t recordings_tried = 0;     // calls of the graph recorder
  uint32_t pauses = 0;
  bool never_record = false;          // the recorder refused for good
  uint64_t last_record_hit = 0;       // the hit of the last recorder call
  uint64_t record_backoff = kFirstBackoff;
  uint64_t replays_at_last_record = 0;
  uint64_t paused_until_hit = 0;      // no replay before this hit
  uint64_t pause_backoff = kFirstBackoff;
  uint64_t misses_base = 0, replays_base = 0;  // misses and replays when replay last paused

  bool paused(uint64_t hits) const { return hits < paused_until_hit; }

  void on_replay() {
    ++replays;
    pause_backoff = kFirstBackoff;
  }

  // A hit that matched no recording (it runs directly); `hits`: the specialization's hits before it.
  void on_miss(uint64_t hits) {
    if (++misses - misses_base <= replays - replays_base + kGraphMissAllowance) return;
    paused_until_hit = hits + pause_backoff;  // then the counts start again
    pause_backoff = std::min(pause_backoff * 2, kMaxBackoff);
    misses_base = misses;
    replays_base = replays;
    ++pauses;
  }

  // Whether the last recorder call has not paid off: no replay since (it failed, or its graph fit no later call).
  bool last_recording_unused() const { return recordings_tried > 0 && replays == replays_at_last_record; }

  // The hit from which the recorder may be called for a call no recording fits: at once while recordings
  // replay, a backoff after one that did not.
  uint64_t record_after_hit() const {
    if (never_record) return UINT64_MAX;
    return last_recording_unused() ? last_record_hit + record_backoff : 0;
  }

  // Before a recorder call: after one that did not pay off, the next backoff doubles; else it starts over.
  void on_record(uint64_t hits) {
    record_backoff = last_recording_unused() ? std::min(record_backoff * 2, kMaxBackoff) : kFirstBackoff;
    last_record_hit = hits;
    replays_at_last_record = replays;
    ++recordings_tried;
  }
};

}  // namespace trident::graphs

#endif  // TRIDENT_GRAPH_POLICY_H
