//! The request-level conformance of `#[idempotent]`, one body of cases
//! (`idem_tests::conformance`) run through every web framework, on the
//! memory store over real HTTP; the tower layer of axum; and the OpenAPI
//! document of both.

mod actix {
    idem_tests::conformance_cases!(idem_tests::conformance::actix_app::Actix);
}

mod axum {
    idem_tests::conformance_cases!(idem_tests::conformance::axum_app::Axum);
}

mod layer;
mod openapi;
