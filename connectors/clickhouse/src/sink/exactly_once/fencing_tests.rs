//! The fencing decisions, and a model of two owners of one partition run
//! through every interleaving of the old owner's steps with the new one's.

use super::*;

/// Cut `from..=to` the way the writer does: a planned block whole, free
/// blocks of at most `limit` offsets, sealed before a planned one.
fn cut(plan: &[(i64, i64)], from: i64, to: i64, limit: i64) -> Vec<(i64, i64)> {
    let mut out = Vec::new();
    let mut o = from;
    while o <= to {
        if let Some(&b) = plan.iter().find(|b| b.0 == o) {
            out.push(b);
            o = b.1 + 1;
            continue;
        }
        let next = (plan.iter().map(|b| b.0).filter(|&f| f > o))
            .min()
            .unwrap_or(i64::MAX);
        let end = (o + limit - 1).min(to).min(next - 1);
        out.push((o, end));
        o = end + 1;
    }
    out
}

/// Blocks that landed twice with other boundaries: the duplicates.
fn clashes(landed: &[(i64, i64)]) -> Vec<((i64, i64), (i64, i64))> {
    let mut out = Vec::new();
    for (i, a) in landed.iter().enumerate() {
        for b in &landed[i + 1..] {
            if a != b && a.0 <= b.1 && b.0 <= a.1 {
                out.push((*a, *b));
            }
        }
    }
    out
}

/// Steps of the old owner A (epoch 5) and the new owner B (epoch 6).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Step {
    /// A records the intent of its block 0..=6.
    ARecord,
    /// A reads the highest fence and sends the block if it may.
    ACheck,
    /// B writes its fence.
    BFence,
    /// B reads the rows and cuts its blocks (limit 10).
    BRead,
    /// B writes its adoption and seal, records its blocks and sends them.
    BSend,
}

/// Every order of A's two steps among B's three.
fn interleavings() -> Vec<Vec<Step>> {
    let mut out = Vec::new();
    for i in 0..5 {
        for j in i + 1..5 {
            let mut b = [Step::BFence, Step::BRead, Step::BSend].into_iter();
            let order = (0..5)
                .map(|k| match k {
                    _ if k == i => Step::ARecord,
                    _ if k == j => Step::ACheck,
                    _ => b.next().unwrap(),
                })
                .collect();
            out.push(order);
        }
    }
    out
}

struct Run {
    rows: Vec<Row>,
    landed: Vec<(i64, i64)>,
}

/// Play `order`; `fenced`: the protocol of this module (else: no check,
/// every intent replayed, as before fencing).
fn play(order: &[Step], fenced: bool, b_crashes_before_send: bool) -> Run {
    play_epochs(order, fenced, b_crashes_before_send, 5, 6)
}

/// [`play`] with the old owner's epoch `A` and the new one's `B`.
#[allow(non_snake_case)]
fn play_epochs(order: &[Step], fenced: bool, b_crashes_before_send: bool, A: u64, B: u64) -> Run {
    let a_block = (0, 6);
    let mut rows = vec![Row::fence(A), Row::seal(A)];
    let mut landed = Vec::new();
    let mut b_cuts = Vec::new();
    let mut b_plan = None;
    for step in order {
        match step {
            Step::ARecord => rows.push(Row::intent(a_block.0, a_block.1, 0, A)),
            Step::ACheck => {
                if !fenced || may_send(highest_fence(&rows), A) {
                    landed.push(a_block);
                }
            }
            Step::BFence => {
                if fenced {
                    rows.push(Row::fence(B));
                }
            }
            Step::BRead => {
                let p = if fenced {
                    plan(&rows, Some(B)).expect("B is the latest owner")
                } else {
                    let rows = rows.iter().filter(|r| r.first >= 0).copied().collect();
                    Plan { rows, sealed: 0 }
                };
                b_cuts = cut(&p.blocks(), 0, 29, 10);
                b_plan = Some(p);
            }
            Step::BSend if b_crashes_before_send => {}
            Step::BSend => {
                if fenced {
                    rows.extend(adoption(b_plan.as_ref().unwrap(), B));
                }
                for &(f, l) in &b_cuts {
                    rows.push(Row::intent(f, l, 0, B));
                    assert!(!fenced || may_send(highest_fence(&rows), B));
                    landed.push((f, l));
                }
            }
        }
    }
    Run { rows, landed }
}

/// What a third owner C (epoch 7, limit 4) cuts from offset 0.
fn third_owner(rows: &[Row]) -> Vec<(i64, i64)> {
    third_owner_at(rows, 7)
}

/// [`third_owner`] at epoch `c`.
fn third_owner_at(rows: &[Row], c: u64) -> Vec<(i64, i64)> {
    let mut rows = rows.to_vec();
    rows.push(Row::fence(c));
    let p = plan(&rows, Some(c)).expect("C is the latest owner");
    cut(&p.blocks(), 0, 29, 4)
}

#[test]
fn owner_epochs_order_generations_then_incarnations() {
    let g5 = owner_epoch(5, 0, 0xAAAA).unwrap();
    assert_eq!(generation_of(g5), 5);
    // A restarted static member: same generation, above the old fence,
    // whatever the two processes' random numbers.
    for nonce in [0, 1, 0xAAAA, 0xFFFF] {
        let again = owner_epoch(5, g5, nonce).unwrap();
        assert!(again > g5 && generation_of(again) == 5, "{nonce:#x}");
        assert!(owner_epoch(5, again, 0).unwrap() > again);
    }
    // A later generation is above every incarnation of an earlier one.
    let last_of_5 = (5 << 32) | 0xFFFF_FFFF;
    assert!(owner_epoch(6, last_of_5, 0).unwrap() > last_of_5);
    assert_eq!(owner_epoch(6, last_of_5, 3), Some((6 << 32) | 3));
    // Epochs of a spate before incarnations (the generation alone) are
    // below every new one.
    assert_eq!(owner_epoch(5, 9, 3), Some((5 << 32) | 3));
    // A fence of a later generation stays above: the owner is stale.
    let later = owner_epoch(7, 0, 0).unwrap();
    let mine = owner_epoch(6, later, 0).unwrap();
    assert_eq!(
        plan(&[Row::fence(later)], Some(mine)),
        Err(Stale { fence: later })
    );
    // Two processes that read the same fence at once differ by nonce.
    assert_ne!(owner_epoch(5, g5, 1), owner_epoch(5, g5, 2));
    assert_eq!(owner_epoch(5, (5 << 32) | (0xFFFF << 16), 0), None);
}

/// A static member (`group.instance.id`) restarted within the session
/// timeout keeps its generation: its new incarnation B takes an epoch
/// above the old one's A, replays A's blocks, and fences A off, in every
/// interleaving, as owners of two generations do.
#[test]
fn a_restarted_static_member_is_a_new_owner_in_every_interleaving() {
    let a = owner_epoch(5, 0, 0xBEEF).unwrap();
    let b = owner_epoch(5, a, 0x0001).unwrap();
    let c = owner_epoch(6, b, 0x1234).unwrap();
    for crash in [false, true] {
        for order in interleavings() {
            let run = play_epochs(&order, true, crash, a, b);
            assert_eq!(clashes(&run.landed), vec![], "{order:?} crash {crash}");
            let cut = third_owner_at(&run.rows, c);
            for l in &run.landed {
                assert!(
                    cut.contains(l),
                    "{order:?} crash {crash}: C cut {cut:?}, {l:?} landed"
                );
            }
        }
    }
}

/// The negative control: with the generation itself as the epoch (as
/// before), the restarted static member skips its old incarnation's seal
/// and never fences it, so the old block lands beside other boundaries.
#[test]
fn with_the_generation_as_the_epoch_a_restarted_static_member_duplicates() {
    let bad = (interleavings().into_iter())
        .filter(|o| !clashes(&play_epochs(o, true, false, 5, 5).landed).is_empty())
        .count();
    assert_eq!(bad, interleavings().len(), "every interleaving duplicates");
}

#[test]
fn every_interleaving_with_an_old_owner_lands_each_offset_once() {
    for crash in [false, true] {
        for order in interleavings() {
            let run = play(&order, true, crash);
            assert_eq!(clashes(&run.landed), vec![], "{order:?} crash {crash}");
            // Whatever landed, a later owner replays at the same offsets
            // (so ClickHouse drops it), with its rows pruned or not.
            let pruned: Vec<Row> = (run.rows.iter())
                .filter(|r| crash || !prunable(r, 6, 0))
                .copied()
                .collect();
            for rows in [&run.rows, &pruned] {
                let c = third_owner(rows);
                for l in &run.landed {
                    assert!(
                        c.contains(l),
                        "{order:?} crash {crash}: C cut {c:?}, {l:?} landed"
                    );
                }
            }
        }
    }
}

/// The negative control: without the fence, the old owner's intent
/// recorded after the new owner's read lands next to the new owner's
/// block over the same offsets, so the model above can fail.
#[test]
fn without_the_fence_a_late_intent_duplicates() {
    let bad: Vec<Vec<Step>> = interleavings()
        .into_iter()
        .filter(|o| !clashes(&play(o, false, false).landed).is_empty())
        .collect();
    assert!(
        bad.contains(&vec![
            Step::BFence,
            Step::BRead,
            Step::ARecord,
            Step::ACheck,
            Step::BSend
        ]),
        "{bad:?}"
    );
    // The same order with the fence: the old owner's block is not sent.
    let run = play(&bad[0], true, false);
    assert!(!run.landed.contains(&(0, 6)), "{:?}", run.landed);
}

#[test]
fn a_stale_owner_is_refused_and_sealed_epochs_decide() {
    let rows = vec![
        Row::fence(3),
        Row::seal(3),
        Row::intent(0, 9, 0, 3),
        Row::intent(0, 9, 1, 3),
        Row::intent(10, 19, 0, 3),
        // Epoch 4 fenced but never sealed (died before its seal): its
        // intents cannot exist, the zombie's late ones of epoch 2 are dead.
        Row::fence(4),
        Row::intent(20, 29, 0, 2),
    ];
    assert_eq!(plan(&rows, Some(3)), Err(Stale { fence: 4 }));
    let p = plan(&rows, Some(5)).unwrap();
    assert_eq!(p.sealed, 3);
    assert_eq!(p.blocks(), vec![(0, 9), (10, 19)]);
    assert_eq!(p.rows.len(), 3, "every shard part is kept");
    let adopted = adoption(&p, 5);
    assert_eq!(adopted.last(), Some(&Row::seal(5)));
    assert!(adopted[..3].iter().all(|r| r.epoch == 5 && r.first >= 0));
    // Without an epoch, the highest seal still decides.
    assert_eq!(plan(&rows, None).unwrap().sealed, 3);
    // Rows of unfenced owners (epoch 0) count until someone seals.
    let old = [Row::intent(0, 4, 0, 0), Row::intent(5, 9, 0, 0)];
    assert_eq!(plan(&old, Some(1)).unwrap().blocks(), vec![(0, 4), (5, 9)]);
    assert!(may_send(5, 5) && may_send(4, 5) && !may_send(6, 5));
    assert!(!generations_restarted(30) && generations_restarted(RESTARTED_AFTER_S));
    assert!(prunable(&Row::intent(0, 9, 0, 5), 5, 10));
    assert!(!prunable(&Row::intent(0, 9, 0, 5), 5, 9));
    assert!(prunable(&Row::fence(4), 5, 0) && !prunable(&Row::seal(5), 5, 0));
}
