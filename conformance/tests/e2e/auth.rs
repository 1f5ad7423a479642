//! Login and logout with username and password.

use crate::harness::*;
use iggy::prelude::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn login_returns_root_user_id_and_logout_ends_the_session() {
    let server = TestServer::start();
    let client = server.anonymous_client().await;

    let identity = ok("login_user", within("login", client.login_user(ROOT_USER, ROOT_PASSWORD)).await);
    assert_eq!(identity.user_id, DEFAULT_ROOT_USER_ID, "login identity user_id");
    let me = ok("get_me after login", within("get_me", client.get_me()).await);
    assert_eq!(me.user_id, Some(DEFAULT_ROOT_USER_ID), "me.user_id after login");

    ok("logout_user", within("logout", client.logout_user()).await);
    expect_code("get_streams after logout", within("get_streams", client.get_streams()).await, 40);

    // The connection stays usable: sign in again.
    let again = ok("second login", within("login", client.login_user(ROOT_USER, ROOT_PASSWORD)).await);
    assert_eq!(again.user_id, DEFAULT_ROOT_USER_ID, "second login identity user_id");
    let streams = ok("get_streams after relogin", within("get_streams", client.get_streams()).await);
    assert!(streams.is_empty(), "no streams yet: {streams:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn login_with_wrong_password_is_refused_with_invalid_credentials() {
    let server = TestServer::start();
    let client = server.anonymous_client().await;
    expect_code(
        "login with a wrong password",
        within("login", client.login_user(ROOT_USER, "not-the-password")).await,
        42,
    );
    // A refused login leaves the connection usable.
    let identity = ok("login after refusal", within("login", client.login_user(ROOT_USER, ROOT_PASSWORD)).await);
    assert_eq!(identity.user_id, DEFAULT_ROOT_USER_ID);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn login_with_unknown_user_is_refused_with_invalid_credentials() {
    let server = TestServer::start();
    let client = server.anonymous_client().await;
    expect_code(
        "login as an unknown user",
        within("login", client.login_user("nobody", "whatever1")).await,
        42,
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connection_string_auto_login_signs_in_on_connect() {
    let server = TestServer::start();
    let client = server.root_client().await;
    let me = ok("get_me", within("get_me", client.get_me()).await);
    assert_eq!(me.user_id, Some(DEFAULT_ROOT_USER_ID));
}
