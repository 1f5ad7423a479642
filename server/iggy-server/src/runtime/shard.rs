//! Thread-per-core: one compio runtime (one io_uring) per shard thread, nothing shared between
//! them but message channels. Shard 0 is the thread that accepts connections and runs the
//! metadata group; every partition is owned by one shard, chosen from its key, and runs its
//! consensus group there. Connections reach a partition through its group's channel, so a
//! partition's state is only ever touched by its own thread.

use futures_channel::{mpsc, oneshot};
use futures_util::StreamExt;
use std::future::Future;
use std::pin::Pin;

type Task = Box<dyn FnOnce() -> Pin<Box<dyn Future<Output = ()>>> + Send>;

/// Handles to every shard's task queue.
pub struct Shards {
    /// Queues of shards 1..n; shard 0 is the calling thread.
    others: Vec<mpsc::UnboundedSender<Task>>,
}

impl Shards {
    /// Starts `count - 1` shard threads beside the current one (shard 0).
    pub fn start(count: usize) -> std::io::Result<Shards> {
        iggy_storage::stall::name_this_thread("iggy-shard-0");
        let mut others = Vec::new();
        for index in 1..count.max(1) {
            let (sender, mut tasks) = mpsc::unbounded::<Task>();
            std::thread::Builder::new()
                .name(format!("iggy-shard-{index}"))
                .spawn(move || {
                    let runtime = match compio::runtime::Runtime::new() {
                        Ok(runtime) => runtime,
                        Err(error) => {
                            return tracing::error!(
                                "shard {index}: cannot start its runtime: {error}"
                            );
                        }
                    };
                    runtime.block_on(async move {
                        while let Some(task) = tasks.next().await {
                            compio::runtime::spawn(task()).detach();
                        }
                    });
                })?;
            others.push(sender);
        }
        Ok(Shards { others })
    }

    pub fn count(&self) -> usize {
        self.others.len() + 1
    }

    /// The shard that owns the partition `key`.
    pub fn owner(&self, key: (u32, u32, u32)) -> usize {
        let hash = (u64::from(key.0) << 40) ^ (u64::from(key.1) << 20) ^ u64::from(key.2);
        (hash.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 32) as usize % self.count()
    }

    /// Runs `make()`'s future on `shard` and returns its output here.
    pub async fn run_on<T, F, Fut>(&self, shard: usize, make: F) -> Option<T>
    where
        T: Send + 'static,
        F: FnOnce() -> Fut + Send + 'static,
        Fut: Future<Output = T> + 'static,
    {
        let (done, result) = oneshot::channel();
        let task: Task = Box::new(move || {
            Box::pin(async move {
                let _ = done.send(make().await);
            })
        });
        if shard == 0 {
            compio::runtime::spawn(task()).detach();
        } else {
            self.others.get(shard - 1)?.unbounded_send(task).ok()?;
        }
        result.await.ok()
    }
}
