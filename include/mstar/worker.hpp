// The worker: three threads (main, GPU, plan) that run a model loaded on an engine, with ready queues
// and batching per node, admission at readiness, the side lane (off, on or automatic), cancellation at
// any moment, and metrics with a Chrome trace. docs/worker.md describes the design.
#pragma once

#include "mstar/worker/flow.hpp"
#include "mstar/worker/lane_policy.hpp"
#include "mstar/worker/options.hpp"
#include "mstar/worker/threaded_worker.hpp"
