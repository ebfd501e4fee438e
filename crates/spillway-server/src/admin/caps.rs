//! The admin API's caps, which the file's checks and the descriptor budget read too.

/// The most connections the admin API holds open at once. Past it (or past
/// `admin.max_pending` connections that have not shown the token), a newcomer takes the place
/// of the oldest connection that has not shown the token; when every place is held by one that
/// has, a newcomer is answered 503 at once. A dashboard holds one for its live feed and opens a
/// few more for a moment.
pub const MAX_CONNECTIONS: usize = 64;
