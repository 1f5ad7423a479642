//! The node's budget of request bodies in flight (`limits.max_request_bodies_size`): a body is
//! reserved whole once its header has arrived and read only when its bytes fit beside those
//! held, so signed-in clients that each send (or stall in) a large body cannot make the node hold
//! more than the budget between them. A connection whose body does not fit is simply not read
//! until it does: its client waits, it is never refused. Reservations are granted in arrival
//! order, so a large body is not passed over for good by smaller ones, and one larger than the
//! whole budget is read when nothing else is held.
//!
//! One budget per node, not per shard: every client connection is read on shard 0 (partitions
//! run on the others, and the bodies travel there by channel, but the reading connection holds
//! the reservation until its request is answered), so the accounting is single-threaded. A
//! per-shard split would only strand budget on shards that read nothing.
//!
//! [`Budget`] is the accounting, sans-IO; [`BodyBudget`] wakes the waiting connections.

use std::cell::RefCell;
use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll, Waker};

/// The bytes held and the reservations waiting, oldest first.
#[derive(Debug)]
pub struct Budget {
    limit: u64,
    held: u64,
    waiting: VecDeque<(Ticket, u64)>,
    next_ticket: u64,
}

/// A waiting reservation's place in line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Ticket(u64);

/// What a reservation got.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reserved {
    /// Its bytes are held now.
    Granted,
    /// It waits for its turn: see [`Budget::grant`].
    Waiting(Ticket),
}

impl Budget {
    pub fn new(limit: u64) -> Self {
        Self {
            limit,
            held: 0,
            waiting: VecDeque::new(),
            next_ticket: 0,
        }
    }

    /// Reserves `bytes`: held at once when nothing waits before them and they fit, else in
    /// line behind the reservations already waiting.
    pub fn reserve(&mut self, bytes: u64) -> Reserved {
        if self.waiting.is_empty() && self.fits(bytes) {
            self.held += bytes;
            return Reserved::Granted;
        }
        let ticket = Ticket(self.next_ticket);
        self.next_ticket += 1;
        self.waiting.push_back((ticket, bytes));
        Reserved::Waiting(ticket)
    }

    /// Grants the waiting reservation `ticket` if it is first in line and fits now (then it
    /// leaves the line and its bytes are held).
    pub fn grant(&mut self, ticket: Ticket) -> bool {
        match self.waiting.front() {
            Some(&(first, bytes)) if first == ticket && self.fits(bytes) => {
                self.waiting.pop_front();
                self.held += bytes;
                true
            }
            _ => false,
        }
    }

    /// Withdraws the waiting reservation `ticket` (its connection went away while it waited).
    pub fn withdraw(&mut self, ticket: Ticket) {
        self.waiting.retain(|(waiting, _)| *waiting != ticket);
    }

    /// Holds at once, without waiting, what is left of the budget up to `wanted`, and never
    /// less than `floor` (nor more than `wanted`): the bytes a poll may build its reply in. While
    /// reservations wait in line only `floor` is held, so replies never take the room a waiting
    /// body is owed. Returns the bytes held.
    pub fn lease(&mut self, wanted: u64, floor: u64) -> u64 {
        let room = match self.waiting.is_empty() {
            true => self.limit.saturating_sub(self.held),
            false => 0,
        };
        let bytes = room.max(floor).min(wanted);
        self.held += bytes;
        bytes
    }

    /// Changes what a lease holds from `from` to `to` bytes (a reply built smaller, or larger
    /// by its one batch past the lease).
    pub fn resize(&mut self, from: u64, to: u64) {
        assert!(from <= self.held, "resized {from} of {} held", self.held);
        self.held = self.held - from + to;
    }

    /// Gives back `bytes` a granted reservation held.
    pub fn release(&mut self, bytes: u64) {
        assert!(bytes <= self.held, "released {bytes} of {} held", self.held);
        self.held -= bytes;
    }

    /// The first waiting reservation, when it fits now: the one to wake.
    pub fn next_due(&self) -> Option<Ticket> {
        let &(ticket, bytes) = self.waiting.front()?;
        self.fits(bytes).then_some(ticket)
    }

    pub fn held(&self) -> u64 {
        self.held
    }

    pub fn waiting(&self) -> usize {
        self.waiting.len()
    }

    pub fn limit(&self) -> u64 {
        self.limit
    }

    /// Whether `bytes` may be held beside what is: within the limit, or alone.
    fn fits(&self, bytes: u64) -> bool {
        self.held == 0 || self.held.saturating_add(bytes) <= self.limit
    }
}

/// The node's budget, shared by its connections' tasks (all on shard 0).
pub struct BodyBudget {
    budget: RefCell<Budget>,
    wakers: RefCell<HashMap<Ticket, Waker>>,
    /// A waiting body is worth a warning, at most once per interval.
    spent: crate::consensus::log_limit::Throttled,
}

/// Bodies of at most this many bytes are read without a reservation on a link that serves one
/// request at a time (TCP, WebSocket, HTTP): such bodies are bounded by the connections (whose
/// read buffers are as large), and pings, polls, offset stores and heartbeats never wait behind
/// large sends.
pub const UNCOUNTED_BODY_MAX: usize = 64 * 1024;

/// How often a spent budget is warned about.
const SPENT_WARNING_INTERVAL: std::time::Duration = std::time::Duration::from_secs(10);

impl BodyBudget {
    pub fn new(limit: u64) -> Self {
        Self {
            budget: RefCell::new(Budget::new(limit)),
            wakers: RefCell::new(HashMap::new()),
            spent: crate::consensus::log_limit::Throttled::new(SPENT_WARNING_INTERVAL),
        }
    }

    /// Bytes held now.
    pub fn held(&self) -> u64 {
        self.budget.borrow().held()
    }

    /// Reservations waiting now.
    pub fn waiting(&self) -> usize {
        self.budget.borrow().waiting()
    }

    /// Holds `bytes` of the budget, waiting for them in line; held until the permit is dropped.
    /// A wait that is dropped (its connection's task ended) leaves the line.
    pub fn reserve(self: &Rc<Self>, bytes: u64) -> Reserve {
        Reserve {
            budget: self.clone(),
            bytes,
            ticket: None,
            warned: false,
        }
    }

    /// Holds up to `wanted` bytes at once (see [`Budget::lease`]): a poll's reply is built
    /// within them, and they are held, resized to the reply, until it is written. Polls never
    /// wait: when the budget is spent their replies shrink to `floor` bytes (whole batches, at
    /// least one) and the consumer polls on.
    pub fn lease(self: &Rc<Self>, wanted: u64, floor: u64) -> BodyPermit {
        let bytes = self.budget.borrow_mut().lease(wanted, floor);
        BodyPermit {
            budget: self.clone(),
            bytes,
        }
    }

    /// Wakes the first waiting reservation if it fits now.
    fn wake_next(&self) {
        let due = self.budget.borrow().next_due();
        // Taken out before the wake, so a waker that polls at once finds nothing borrowed.
        let waker = due.and_then(|ticket| self.wakers.borrow_mut().remove(&ticket));
        if let Some(waker) = waker {
            waker.wake();
        }
    }

    fn warn_spent(&self, bytes: u64) {
        let Some(held_back) = self.spent.due(std::time::Instant::now()) else {
            return;
        };
        let budget = self.budget.borrow();
        tracing::warn!(
            "a request body of {bytes} bytes waits to be read: the node holds {} of \
             limits.max_request_bodies_size = {} bytes of request bodies, with {} waiting \
             ({held_back} more waits since the last warning)",
            budget.held(),
            budget.limit(),
            budget.waiting()
        );
    }
}

/// A reservation on its way: resolves to the permit once its bytes are held.
pub struct Reserve {
    budget: Rc<BodyBudget>,
    bytes: u64,
    ticket: Option<Ticket>,
    /// The wait was warned about (or held back by the throttle).
    warned: bool,
}

impl Future for Reserve {
    type Output = BodyPermit;

    fn poll(mut self: Pin<&mut Self>, context: &mut Context<'_>) -> Poll<BodyPermit> {
        let this = &mut *self;
        let granted = match this.ticket {
            None => match this.budget.budget.borrow_mut().reserve(this.bytes) {
                Reserved::Granted => true,
                Reserved::Waiting(ticket) => {
                    this.ticket = Some(ticket);
                    false
                }
            },
            Some(ticket) => this.budget.budget.borrow_mut().grant(ticket),
        };
        if !granted {
            let ticket = this.ticket.expect("a waiting reservation has a ticket");
            let waker = context.waker().clone();
            this.budget.wakers.borrow_mut().insert(ticket, waker);
            if !std::mem::replace(&mut this.warned, true) {
                this.budget.warn_spent(this.bytes);
            }
            return Poll::Pending;
        }
        if let Some(ticket) = this.ticket.take() {
            this.budget.wakers.borrow_mut().remove(&ticket);
            // The next in line may fit beside this one.
            this.budget.wake_next();
        }
        Poll::Ready(BodyPermit {
            budget: this.budget.clone(),
            bytes: std::mem::take(&mut this.bytes),
        })
    }
}

impl Drop for Reserve {
    fn drop(&mut self) {
        if let Some(ticket) = self.ticket.take() {
            self.budget.budget.borrow_mut().withdraw(ticket);
            self.budget.wakers.borrow_mut().remove(&ticket);
            // It may have been first in line, holding back the next.
            self.budget.wake_next();
        }
    }
}

/// Bytes of the budget held for one request body; given back when dropped.
pub struct BodyPermit {
    budget: Rc<BodyBudget>,
    bytes: u64,
}

impl BodyPermit {
    /// The bytes held.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Holds `other`'s bytes too, given back with these (a body reserved in parts).
    pub fn absorb(&mut self, mut other: BodyPermit) {
        self.bytes += std::mem::take(&mut other.bytes);
    }

    /// Holds `bytes` instead: what the reply built within the permit takes.
    pub fn resize(&mut self, bytes: u64) {
        let from = std::mem::replace(&mut self.bytes, bytes);
        self.budget.budget.borrow_mut().resize(from, bytes);
        if bytes < from {
            self.budget.wake_next();
        }
    }
}

impl Drop for BodyPermit {
    fn drop(&mut self) {
        if self.bytes > 0 {
            self.budget.budget.borrow_mut().release(self.bytes);
            self.budget.wake_next();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reservations_that_fit_are_held_and_the_rest_wait_in_order() {
        let mut budget = Budget::new(100);
        assert_eq!(budget.reserve(60), Reserved::Granted);
        let Reserved::Waiting(large) = budget.reserve(50) else {
            panic!("60 + 50 is over 100");
        };
        // A small one that would fit waits behind the large one: the large is not passed over.
        let Reserved::Waiting(small) = budget.reserve(10) else {
            panic!("waits in line");
        };
        assert_eq!(budget.next_due(), None);
        assert!(!budget.grant(small));
        budget.release(60);
        assert_eq!(budget.next_due(), Some(large));
        assert!(!budget.grant(small), "not first in line");
        assert!(budget.grant(large));
        assert_eq!(budget.next_due(), Some(small));
        assert!(budget.grant(small));
        assert_eq!((budget.held(), budget.waiting()), (60, 0));
    }

    #[test]
    fn a_lease_takes_what_is_left_never_less_than_its_floor_and_nothing_a_waiting_body_is_owed() {
        let mut budget = Budget::new(100);
        assert_eq!(budget.lease(1000, 10), 100, "the room left");
        assert_eq!(budget.lease(1000, 10), 10, "the floor, past the limit");
        assert_eq!(budget.lease(5, 10), 5, "never more than wanted");
        budget.resize(100, 30);
        assert_eq!(budget.held(), 45);
        let Reserved::Waiting(body) = budget.reserve(60) else {
            panic!("45 + 60 is over 100");
        };
        assert_eq!(budget.lease(1000, 10), 10, "a body waits: only the floor");
        budget.release(30);
        assert_eq!(budget.next_due(), Some(body));
        assert!(budget.grant(body));
        assert_eq!(budget.held(), 85);
    }

    #[test]
    fn a_body_larger_than_the_budget_is_held_alone() {
        let mut budget = Budget::new(100);
        assert_eq!(budget.reserve(500), Reserved::Granted);
        let Reserved::Waiting(next) = budget.reserve(1) else {
            panic!("nothing fits beside a body over the budget");
        };
        budget.release(500);
        assert!(budget.grant(next));
        let Reserved::Waiting(large) = budget.reserve(500) else {
            panic!("waits until nothing is held");
        };
        budget.release(1);
        assert!(budget.grant(large));
    }

    #[test]
    fn a_withdrawn_reservation_leaves_the_line() {
        let mut budget = Budget::new(100);
        assert_eq!(budget.reserve(100), Reserved::Granted);
        let Reserved::Waiting(gone) = budget.reserve(100) else {
            panic!("full");
        };
        let Reserved::Waiting(next) = budget.reserve(50) else {
            panic!("full");
        };
        budget.withdraw(gone);
        budget.release(100);
        assert_eq!(budget.next_due(), Some(next));
        assert!(budget.grant(next));
        assert_eq!(budget.reserve(50), Reserved::Granted);
        assert_eq!(budget.reserve(1), Reserved::Waiting(Ticket(2)));
    }

    #[test]
    fn permits_wake_the_waiting_in_turn_and_a_dropped_wait_wakes_the_next() {
        use futures_util::FutureExt;
        let budget = Rc::new(BodyBudget::new(100));
        let first = budget.reserve(80).now_or_never().expect("fits");
        let mut second = Box::pin(budget.reserve(80));
        let mut third = Box::pin(budget.reserve(20));
        let waker = futures_util::task::noop_waker();
        let mut context = Context::from_waker(&waker);
        assert!(second.as_mut().poll(&mut context).is_pending());
        assert!(third.as_mut().poll(&mut context).is_pending());
        // The second, waiting first, goes away: the third fits beside the first.
        drop(second);
        let Poll::Ready(third) = third.as_mut().poll(&mut context) else {
            panic!("20 fits beside 80 once the second left the line");
        };
        assert_eq!(budget.held(), 100);
        drop(first);
        drop(third);
        assert_eq!(budget.held(), 0);
        assert!(budget.wakers.borrow().is_empty());
    }
}
