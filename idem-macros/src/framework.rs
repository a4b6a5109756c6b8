//! The web framework an attribute expands for, and how its messages name
//! it: `#[idempotent]` is actix-web's, `#[idempotent_axum]` (re-exported by
//! the runtime as `idem_runtime::axum::idempotent`) axum's.

/// The framework of one expansion.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Framework {
    Actix,
    Axum,
}

impl Framework {
    /// Its handlers, as messages name them.
    pub(crate) fn handler(self) -> &'static str {
        match self {
            Self::Actix => "an actix-web handler",
            Self::Axum => "an axum handler",
        }
    }

    /// The extractor of shared state, as messages suggest it.
    pub(crate) fn state(self) -> &'static str {
        match self {
            Self::Actix => "`web::Data<T>`",
            Self::Axum => "`State<T>`",
        }
    }

    /// Extractors that own what they hold, as messages list them.
    pub(crate) fn owning(self) -> &'static str {
        match self {
            Self::Actix => "`web::Json<T>`, `web::Data<T>`, `String`",
            Self::Axum => "`Json<T>`, `State<T>`, `String`",
        }
    }

    /// The attribute's path within the runtime crate, for an attribute that
    /// applies it again.
    pub(crate) fn attribute(self) -> proc_macro2::TokenStream {
        match self {
            Self::Actix => quote::quote!(idempotent),
            Self::Axum => quote::quote!(axum::idempotent),
        }
    }
}
