// The edge on the CUDA backend: a producer step's rows copied device to device into the ring (one
// device) and read back intact after the consumer's stream waited on the slot's event; with two
// devices, the same from device 0's memory into a ring on device 1 (a peer copy); each copy timed by
// the edge's timing events (every copy measured, none longer than a bound). Exit 77 (skip)
// without a device. Run: build-gpu/tests/split/mstar_edge_gpu_test
#include <cstdio>
#include <cstdint>
#include <vector>

#include <cuda_runtime.h>

#include <mstar/backend/cuda.hpp>
#include <mstar/backend/cuda_impl.hpp> // this program's one definition of the CUDA backend
#include <mstar/worker/edge.hpp>

namespace {

int check_pair(mstar::cuda_backend& producer_dev, mstar::cuda_backend& consumer_dev, const char* what) {
  constexpr std::uint32_t rows = 64;
  // The ring and the consumer's stream on the consumer's device; the producer's rows on its own.
  mstar::local_edge<mstar::cuda_backend, std::int32_t> e(consumer_dev, {.slots = 4, .max_rows = rows, .name = what, .time_copies = true},
                                                         &producer_dev);
  auto producer = producer_dev.create_stream();
  auto consumer = consumer_dev.create_stream();
  auto* src = static_cast<std::int32_t*>(producer_dev.allocate_device(rows * sizeof(std::int32_t)));
  std::vector<std::int32_t> host(rows), back(rows);
  int bad = 0;
  for (int step = 0; step < 12; ++step) { // three laps of the ring
    for (std::uint32_t i = 0; i < rows; ++i)
      host[i] = step * 1000 + std::int32_t(i);
    producer_dev.copy_to_device(src, host.data(), rows * sizeof(std::int32_t), producer);
    const auto t = e.send(producer, src, rows);
    const std::int32_t* slot = e.receive(consumer, t);
    consumer_dev.copy_to_host(back.data(), slot, rows * sizeof(std::int32_t), consumer);
    e.release(consumer, t, rows);
    consumer_dev.synchronize(consumer);
    for (std::uint32_t i = 0; i < rows; ++i)
      bad += back[i] != host[i];
    producer_dev.synchronize(producer); // src is rewritten next step
  }
  producer_dev.free_device(src);
  consumer_dev.synchronize(e.copy_stream());
  const auto timed = e.copy_time();
  std::printf("%s: %d wrong values over 12 sends, %u of 4 slots free; copies timed %llu (unmeasured %llu), "
              "%.2f us mean, %.2f us max\n",
              what, bad, e.slots_free(), static_cast<unsigned long long>(timed.copies),
              static_cast<unsigned long long>(timed.unmeasured), timed.mean_ns() / 1e3, double(timed.max_ns) / 1e3);
  // A 256-byte copy takes microseconds; a second would mean the events timed something else.
  const bool timing_ok = timed.copies == 12 && timed.unmeasured == 0 && timed.max_ns > 0 && timed.max_ns < 1'000'000'000;
  return bad == 0 && timing_ok ? 0 : 1;
}

} // namespace

int main() {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::puts("no CUDA device: skipped");
    return 77;
  }
  mstar::cuda_backend d0({.device = 0});
  int rc = check_pair(d0, d0, "one device (device-to-device)");
  if (devices >= 2) {
    mstar::cuda_backend d1({.device = 1});
    const bool can = d1.enable_peer_access(d0);
    rc |= check_pair(d0, d1, can ? "device 0 -> device 1 (peer access)" : "device 0 -> device 1 (staged)");
  }
  return rc;
}
