// mstar: a C++20/CUDA header-mostly scheduling framework for multi-stage GPU inference.
// The umbrella header: it only includes.
#pragma once

#include "mstar/model/descriptor.hpp"
#include "mstar/model/dtype.hpp"
#include "mstar/model/model.hpp"
#include "mstar/model/policies.hpp"
#include "mstar/model/rules.hpp"
#include "mstar/model/validate.hpp"
