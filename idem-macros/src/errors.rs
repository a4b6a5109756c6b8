//! Reporting every error of an attribute at once.

/// One error carrying every message, if there is any.
pub(crate) fn combine(errors: impl IntoIterator<Item = syn::Error>) -> Option<syn::Error> {
    errors.into_iter().reduce(|mut all, error| {
        all.combine(error);
        all
    })
}
