//! Giving the allocator's free memory back to the kernel.
//!
//! glibc's `malloc` returns freed memory to the kernel only from the top of its heaps. Creating
//! or restoring many shapes interleaves their long-lived allocations with the short-lived ones
//! of the work (requests, snapshots, catalog reads), so what the work freed stays resident
//! between the shapes: at 10,000 restored shapes, more than the shapes themselves hold.
//! `malloc_trim` hands every free page back, wherever it lies.

/// Returns the allocator's free pages to the kernel (glibc's `malloc_trim(0)`); whether any
/// memory was released. A no-op with other C libraries.
pub fn release_free_heap() -> bool {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        // SAFETY: `malloc_trim` takes no pointer and may be called from any thread at any time.
        unsafe { libc::malloc_trim(0) == 1 }
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    {
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    #[test]
    fn freed_memory_between_live_allocations_leaves_the_resident_set() {
        fn rss_bytes() -> u64 {
            let status = std::fs::read_to_string("/proc/self/status").expect("status");
            let line = status
                .lines()
                .find(|l| l.starts_with("VmRSS:"))
                .expect("VmRSS");
            let kb: u64 = line
                .split_whitespace()
                .nth(1)
                .and_then(|n| n.parse().ok())
                .expect("VmRSS value");
            kb * 1024
        }
        // 64 MiB in 16 KiB blocks, below glibc's mmap threshold so they come from the heap, with
        // a small block kept after each: freeing the big ones leaves holes no top trim reaches.
        let mut big = Vec::new();
        let mut kept = Vec::new();
        for _ in 0..4096 {
            big.push(vec![1u8; 16 << 10]);
            kept.push(vec![2u8; 64]);
        }
        drop(big);
        let before = rss_bytes();
        release_free_heap();
        let after = rss_bytes();
        assert!(
            before.saturating_sub(after) >= 32 << 20,
            "RSS {before} -> {after} bytes: the freed 64 MiB were not returned"
        );
        assert_eq!(
            kept.iter().map(|k| usize::from(k[0])).sum::<usize>(),
            2 * 4096
        );
    }
}
