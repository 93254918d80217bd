// StoreState: what one open store shares between its Store object, its writers and readers (which
// may outlive the Store object that made them): options, layout, the pack catalog and the workers.
#pragma once

#include <memory>

#include "gcr/store.h"
#include "io/io_queue.h"
#include "store/catalog.h"
#include "store/layout.h"
#include "gcr/store_workers.h"

namespace gcr::store {

struct StoreState {
  StoreState(StoreOptions opts)
      : options(std::move(opts)),
        layout{options.root},
        catalog(layout),
        pool(options.worker_threads) {}

  std::unique_ptr<io::IoQueue> new_io() const {
    return io::make_io_queue(options.queue_depth, options.use_io_uring);
  }

  const StoreOptions options;
  const Layout layout;
  PackCatalog catalog;
  WorkerPool pool;
};

struct Store::Impl {
  std::shared_ptr<StoreState> state;
};

}  // namespace gcr::store
