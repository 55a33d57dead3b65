// mstar: a C++20/CUDA header-mostly scheduling framework for multi-stage GPU inference.
// The umbrella header: it only includes.
#pragma once

#include "mstar/descriptor.hpp"
#include "mstar/dtype.hpp"
#include "mstar/model.hpp"
#include "mstar/resources.hpp"
#include "mstar/rules.hpp"
#include "mstar/validate.hpp"
