//! CPU-heavy work that must not run on a shard thread: a password's argon2 check or hash takes
//! tens of milliseconds of CPU and 19 MiB. On shard 0 it would hold every connection's requests
//! and the metadata group's frames for as long (a login storm after a restart, for seconds).
//! A few threads of its own run it, at most one job each at a time, so a storm also takes at
//! most that many times 19 MiB; the others wait in order.

use futures_channel::oneshot;
use std::sync::mpsc;
use std::sync::{Arc, Mutex};

type Job = Box<dyn FnOnce() + Send>;

/// The threads that run offloaded jobs, and their queue.
pub struct Offload {
    jobs: mpsc::Sender<Job>,
}

impl Offload {
    /// Starts `threads` worker threads (at least one).
    pub fn start(threads: usize) -> std::io::Result<Offload> {
        let (jobs, queue) = mpsc::channel::<Job>();
        let queue = Arc::new(Mutex::new(queue));
        for index in 0..threads.max(1) {
            let queue = queue.clone();
            std::thread::Builder::new()
                .name(format!("iggy-offload-{index}"))
                .spawn(move || {
                    loop {
                        // The lock is held only while waiting for the next job.
                        let job = match queue.lock() {
                            Ok(queue) => queue.recv(),
                            Err(_) => return,
                        };
                        match job {
                            Ok(job) => job(),
                            // Every sender is gone: the server is stopping.
                            Err(_) => return,
                        }
                    }
                })?;
        }
        Ok(Offload { jobs })
    }

    /// Runs `work` on a worker thread and returns its result here. A panic in `work` is the
    /// server's (its hook stops the process); the job still runs if this future is dropped.
    pub async fn run<T: Send + 'static>(&self, work: impl FnOnce() -> T + Send + 'static) -> T {
        let (done, result) = oneshot::channel();
        let job: Job = Box::new(move || {
            let _ = done.send(work());
        });
        self.jobs
            .send(job)
            .expect("the offload threads run as long as the server");
        result.await.expect("an offloaded job ends with its result")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    /// Jobs run off the calling thread, no more of them at once than there are threads, and
    /// every caller gets its own job's result.
    #[test]
    fn jobs_run_on_the_offload_threads_at_most_one_per_thread() {
        let offload = Offload::start(2).unwrap();
        let running = Arc::new(AtomicUsize::new(0));
        let most = Arc::new(AtomicUsize::new(0));
        let caller = std::thread::current().id();
        let results = compio::runtime::Runtime::new().unwrap().block_on(async {
            let jobs = (0..6).map(|n| {
                let (running, most) = (running.clone(), most.clone());
                offload.run(move || {
                    let now = running.fetch_add(1, Ordering::SeqCst) + 1;
                    most.fetch_max(now, Ordering::SeqCst);
                    std::thread::sleep(Duration::from_millis(20));
                    running.fetch_sub(1, Ordering::SeqCst);
                    (n, std::thread::current().id() != caller)
                })
            });
            futures_util::future::join_all(jobs).await
        });
        assert_eq!(
            results,
            (0..6).map(|n| (n, true)).collect::<Vec<_>>(),
            "each caller gets its own job's result, computed off its thread"
        );
        assert!(most.load(Ordering::SeqCst) <= 2);
    }
}
