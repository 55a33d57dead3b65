// mstar: a C++20/CUDA header-mostly scheduling framework for multi-stage GPU inference.
// The umbrella header: it only includes, every public header that needs no CUDA header, layer by layer
// (docs/architecture.md). The CUDA backend's definitions are the one more include, in exactly one
// translation unit of a program built with cuda_runtime.h: <mstar/backend/cuda_impl.hpp>. Device code
// (<mstar/kernels/recurrent.cuh>) is included only by the .cu that instantiates a model's kernels.
// The YAML loader's functions (model/config.hpp) link mstar_config.
#pragma once

// model description: descriptors, rules, the validator, the policies, the YAML entry point
#include "mstar/model/compare.hpp"
#include "mstar/model/config.hpp"
#include "mstar/model/descriptor.hpp"
#include "mstar/model/dtype.hpp"
#include "mstar/model/fixed_string.hpp"
#include "mstar/model/model.hpp"
#include "mstar/model/policies.hpp"
#include "mstar/model/rules.hpp"
#include "mstar/model/static_vector.hpp"
#include "mstar/model/validate.hpp"

// kernels: CUDA-free launchers and host references
#include "mstar/kernels/recurrent.hpp"

// backends: the concept, the ordering checker, host and CUDA (declarations only)
#include "mstar/backend/backend.hpp"
#include "mstar/backend/cuda.hpp"
#include "mstar/backend/host.hpp"
#include "mstar/backend/ordering.hpp"

// resources
#include "mstar/resources/attention.hpp"
#include "mstar/resources/kv_cache.hpp"
#include "mstar/resources/positions.hpp"
#include "mstar/resources/recurrent_state_pool.hpp"
#include "mstar/resources/resource.hpp"
#include "mstar/resources/sampler.hpp"
#include "mstar/resources/step_view.hpp"

// engine core
#include "mstar/engine/engine.hpp"
#include "mstar/engine/node_staging.hpp"
#include "mstar/engine/resource_set.hpp"
#include "mstar/engine/step.hpp"
#include "mstar/engine/step_runner.hpp"

// worker (threaded_worker and the parts it is composed of, one thread each)
#include "mstar/worker/admission.hpp"
#include "mstar/worker/client_inbox.hpp"
#include "mstar/worker/edge.hpp"
#include "mstar/worker/flow.hpp"
#include "mstar/worker/lane_policy.hpp"
#include "mstar/worker/launcher.hpp"
#include "mstar/worker/metrics.hpp"
#include "mstar/worker/nvtx.hpp"
#include "mstar/worker/options.hpp"
#include "mstar/worker/ready_queues.hpp"
#include "mstar/worker/stager.hpp"
#include "mstar/worker/threaded_worker.hpp"
#include "mstar/worker/topology.hpp"
#include "mstar/worker/trace.hpp"
#include "mstar/worker/worker_shared.hpp"
#include "mstar/worker/worker_trace.hpp"
