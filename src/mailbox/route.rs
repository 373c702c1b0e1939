//! The mailbox routes, as the metrics and the request log name them: one per operation, so
//! a dashboard reads "prune" rather than a method on a path. A request whose path names no
//! route (the one 404 before authentication) is labelled [`NOT_FOUND`]; a method a path does
//! not take is labelled with the route of the path it hit (the path's first operation, as
//! listed on [`Route`]).

/// A mailbox operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Route {
    /// `PUT /v1/<app>/mailbox/<id>`: claim or heartbeat (and any other method on that path).
    Claim,
    /// `DELETE /v1/<app>/mailbox/<id>`.
    Erase,
    /// `PUT .../<dir>/<seq>`.
    Put,
    /// `GET .../<dir>` (and any other method on that path).
    List,
    /// `GET` or `HEAD .../<dir>/<seq>` (and any other method on that path).
    Get,
    /// `HEAD .../<dir>`.
    Head,
    /// `DELETE .../<dir>?upto=<seq>`.
    Prune,
    /// `PUT .../<dir>/push` (and any other method on that path).
    Register,
    /// `DELETE .../<dir>/push`.
    Unregister,
    /// `GET .../<dir>/watch`, the watch socket.
    Watch,
    /// `GET .../signal/<side>`, the signal socket.
    Signal,
    /// `GET .../ice`.
    Ice,
}

/// The label of a request whose path names no route.
pub const NOT_FOUND: &str = "not_found";

impl Route {
    /// Every route, in the order the metrics register them.
    pub const ALL: [Route; 12] = [
        Route::Claim,
        Route::Erase,
        Route::Put,
        Route::List,
        Route::Get,
        Route::Head,
        Route::Prune,
        Route::Register,
        Route::Unregister,
        Route::Watch,
        Route::Signal,
        Route::Ice,
    ];

    /// The statuses every route is registered with at zero: those it answers most, so a
    /// dashboard's rates exist before the first request.
    pub const USUAL_STATUSES: [u16; 5] = [200, 201, 204, 429, 503];

    /// The label.
    pub fn as_str(self) -> &'static str {
        match self {
            Route::Claim => "claim",
            Route::Erase => "erase",
            Route::Put => "put",
            Route::List => "list",
            Route::Get => "get",
            Route::Head => "head",
            Route::Prune => "prune",
            Route::Register => "register",
            Route::Unregister => "unregister",
            Route::Watch => "watch",
            Route::Signal => "signal",
            Route::Ice => "ice",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_are_distinct_and_not_the_404s() {
        let labels: std::collections::HashSet<_> = Route::ALL.iter().map(|r| r.as_str()).collect();
        assert_eq!(labels.len(), Route::ALL.len());
        assert!(!labels.contains(NOT_FOUND));
    }
}
