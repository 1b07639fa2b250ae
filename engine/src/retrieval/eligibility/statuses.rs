//! The status classes a filter may select ([`FilterExpr::selectable_statuses`]):
//! what graph expansion may walk through beyond the active class.

use super::{FilterExpr, StatusClass};

impl StatusClass {
    /// Every class, as a mask of [`StatusClass::bit`]s.
    pub const ALL: u8 = 0b1111;

    /// The class's bit in a mask.
    pub fn bit(self) -> u8 {
        match self {
            StatusClass::Active => 1,
            StatusClass::Superseded => 2,
            StatusClass::Historical => 4,
            StatusClass::Stale => 8,
        }
    }
}

impl FilterExpr {
    /// The status classes a record the expression selects may be in, as
    /// a mask of [`StatusClass::bit`]s (an over-approximation: a term on
    /// another field may hold or not for a record of any class). Graph
    /// expansion passes through those classes and no others.
    pub fn selectable_statuses(&self) -> u8 {
        self.status_bounds().1
    }

    /// (classes for which the expression holds whatever the record's other
    /// fields, classes for which it may hold): three-valued, so `NOT` of a
    /// term on another field stays "may".
    fn status_bounds(&self) -> (u8, u8) {
        match self {
            FilterExpr::All => (StatusClass::ALL, StatusClass::ALL),
            FilterExpr::StatusIn { statuses } => {
                let m = statuses.iter().fold(0, |m, s| m | s.bit());
                (m, m)
            }
            FilterExpr::And { terms } => {
                terms
                    .iter()
                    .fold((StatusClass::ALL, StatusClass::ALL), |(must, may), t| {
                        let (m, y) = t.status_bounds();
                        (must & m, may & y)
                    })
            }
            FilterExpr::Or { terms } => terms.iter().fold((0, 0), |(must, may), t| {
                let (m, y) = t.status_bounds();
                (must | m, may | y)
            }),
            FilterExpr::Not { term } => {
                let (must, may) = term.status_bounds();
                (StatusClass::ALL & !may, StatusClass::ALL & !must)
            }
            _ => (0, StatusClass::ALL),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::*;

    /// The classes a filter may select: exact for status terms, "any" for
    /// a term on another field, three-valued under `NOT`.
    #[test]
    fn the_statuses_a_filter_may_select() {
        use StatusClass::*;
        let st = |v: &[StatusClass]| FilterExpr::StatusIn {
            statuses: v.to_vec(),
        };
        let kind = FilterExpr::In {
            field: NameField::Kind,
            values: vec!["k".into()],
        };
        let not = |e: FilterExpr| FilterExpr::Not { term: Box::new(e) };
        let mask = |v: &[StatusClass]| v.iter().fold(0, |m, s| m | s.bit());
        let cases = [
            (st(&[Active]), mask(&[Active])),
            (st(&[Active, Historical]), mask(&[Active, Historical])),
            (not(st(&[Active])), mask(&[Superseded, Historical, Stale])),
            (
                FilterExpr::And {
                    terms: vec![st(&[Active]), kind.clone()],
                },
                mask(&[Active]),
            ),
            // another field's term may select a record of any class
            (
                FilterExpr::Or {
                    terms: vec![st(&[Historical]), kind.clone()],
                },
                StatusClass::ALL,
            ),
            (
                FilterExpr::And {
                    terms: vec![st(&[Historical]), not(kind.clone())],
                },
                mask(&[Historical]),
            ),
            (
                not(FilterExpr::And {
                    terms: vec![st(&[Active]), kind],
                }),
                StatusClass::ALL,
            ),
            (not(not(st(&[Stale]))), mask(&[Stale])),
        ];
        for (e, want) in cases {
            assert_eq!(e.selectable_statuses(), want, "{e:?}");
        }
    }
}
