//! Changing a table that readers hold without a lock, without copying it per change: the
//! left-right scheme behind the engine's SPD and SAD (and tunneld's ESP-in-UDP peer table).
//! The writer keeps the current table (an `Arc` it publishes) and a *spare*, the table as it
//! was before the previous change, with the changes made since; a change is made on the spare,
//! brought up to date first, once no reader holds it, and the two swap.

use alloc::sync::Arc;
use alloc::vec::Vec;

/// A change to a table, kept to be made again on the spare copy: it must do the same on
/// both copies (carry what it decides, e.g. a new entry's `Arc`, rather than decide again).
pub trait Change<T>: Clone {
    /// What making the change returns.
    type Out;
    /// Makes the change on `table`.
    fn apply(self, table: &mut T) -> Self::Out;
}

/// Makes `change` to the table `current` (the SPD or the SAD), which workers may be reading
/// in a published data plane, and returns what it returns. A read-copy-update without the
/// copy, the left-right scheme: the change is made on `spare`, the table as it was before the
/// previous change, once no published plane holds it any more, after the changes made since
/// (its log); it becomes the current table, and the one it replaces the next spare. Only
/// when a worker still holds the spare (a plane it loaded before the previous change) is the
/// current table copied, as every change did before (copying 100,000 policies and their
/// index takes milliseconds). A table not yet published (a second change before
/// the engine's publish) is changed in place. Publishes nothing:
/// the caller publishes `current`, then calls [`catch_up`].
pub fn change<T: Clone, C: Change<T>>(current: &mut Arc<T>, spare: &mut Option<(Arc<T>, Vec<C>)>, c: C) -> C::Out {
    if let Some(cur) = Arc::get_mut(current) {
        let out = c.clone().apply(cur);
        if let Some((_, log)) = spare {
            log.push(c);
        }
        return out;
    }
    let mut next = match spare.take() {
        Some((mut s, log)) => match Arc::get_mut(&mut s) {
            Some(m) => {
                for l in log {
                    l.apply(m);
                }
                s
            }
            None => Arc::new((**current).clone()),
        },
        None => Arc::new((**current).clone()),
    };
    // Unshared here (a fresh copy, or a spare nobody else holds): no copy is made.
    let out = c.clone().apply(Arc::make_mut(&mut next));
    let previous = core::mem::replace(current, next);
    *spare = Some((previous, alloc::vec![c]));
    out
}

/// Brings a spare table up to date if no data plane holds it: done after each publish, so
/// the spare drops the SAs taken out (their memory and counters go at once) and the next
/// change finds it ready.
pub fn catch_up<T, C: Change<T>>(spare: &mut Option<(Arc<T>, Vec<C>)>) {
    if let Some((s, log)) = spare {
        if let Some(m) = Arc::get_mut(s) {
            for l in log.drain(..) {
                l.apply(m);
            }
        }
    }
}
