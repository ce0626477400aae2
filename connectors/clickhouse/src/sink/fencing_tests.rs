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
    const A: u64 = 5;
    const B: u64 = 6;
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
    let mut rows = rows.to_vec();
    rows.push(Row::fence(7));
    let p = plan(&rows, Some(7)).expect("C is the latest owner");
    cut(&p.blocks(), 0, 29, 4)
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
