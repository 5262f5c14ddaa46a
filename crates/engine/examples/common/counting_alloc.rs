//! A global allocator that counts the heap bytes live, charged only with what is allocated and
//! freed inside [`charged`] on the calling thread, so a measurement sees what the code under
//! test keeps and nothing of the harness around it. Deterministic, unlike the RSS. Included by
//! path (`#[path = ...] mod counting_alloc;`) into the memory examples and tests of the engine
//! and the IKE crate; it installs itself as the binary's global allocator.
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicIsize, Ordering};

struct Counting;
static LIVE: AtomicIsize = AtomicIsize::new(0);
thread_local! { static CHARGE: Cell<bool> = const { Cell::new(false) }; }

// SAFETY: delegates to the system allocator unchanged; only counts.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        if CHARGE.with(Cell::get) {
            LIVE.fetch_add(l.size() as isize, Ordering::Relaxed);
        }
        // SAFETY: the caller's layout, as System requires.
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        if CHARGE.with(Cell::get) {
            LIVE.fetch_sub(l.size() as isize, Ordering::Relaxed);
        }
        // SAFETY: p came from alloc with this layout.
        unsafe { System.dealloc(p, l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, new: usize) -> *mut u8 {
        if CHARGE.with(Cell::get) {
            LIVE.fetch_add(new as isize - l.size() as isize, Ordering::Relaxed);
        }
        // SAFETY: as above.
        unsafe { System.realloc(p, l, new) }
    }
}

#[global_allocator]
static A: Counting = Counting;

/// Runs `f` with its allocations and frees counted.
pub fn charged<T>(f: impl FnOnce() -> T) -> T {
    CHARGE.with(|c| c.set(true));
    let r = f();
    CHARGE.with(|c| c.set(false));
    r
}

/// The bytes allocated and not freed inside [`charged`] so far.
pub fn live() -> isize {
    LIVE.load(Ordering::Relaxed)
}
