//! A global allocator that counts allocations (and reallocations) made on
//! the threads that turn counting on: the allocation-free tests install it,
//! alone in their test binaries. Shared by `connectors/clickhouse/tests/
//! alloc_free.rs` and the root package's `tests/alloc_free_events.rs`.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

pub struct Counting;

thread_local! {
    /// Count only on the measuring thread: the test harness's other threads
    /// may allocate meanwhile.
    pub static COUNTING: Cell<bool> = const { Cell::new(false) };
    /// Per thread too: two tests of one binary measure in parallel, and a
    /// shared counter let one test's allocations show up in the other's
    /// window (a CI run counted 1 in a window that allocates nothing).
    static ALLOCS: Cell<u64> = const { Cell::new(0) };
}

/// Allocations counted so far on the calling thread.
pub fn allocs() -> u64 {
    ALLOCS.try_with(Cell::get).unwrap_or(0)
}

fn count() {
    if COUNTING.try_with(Cell::get).unwrap_or(false) {
        let _ = ALLOCS.try_with(|n| n.set(n.get() + 1));
    }
}

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count();
        // SAFETY: forwarded unchanged to the system allocator.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded unchanged to the system allocator.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count();
        // SAFETY: forwarded unchanged to the system allocator.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;
