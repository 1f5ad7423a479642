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

/// A password check is tens of milliseconds of CPU and 19 MiB (argon2): a login in progress must
/// not hold another client's requests meanwhile (nor, in a cluster, the replica plane's
/// frames). A debug-build hook stretches every password check and hash to 3 s, as a login storm
/// on a slow CPU would; a client signed in by token pings while another client's password
/// login is under way, and is answered long before that login ends (when the check held the
/// thread, both answers left the server together, 2.5 s after the ping).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_password_login_in_progress_holds_no_other_clients_requests() {
    let server = TestServer::start_with_env(&[("IGGY_DEBUG_PASSWORD_WORK_DELAY_MS", "3000")]);
    let admin = server.root_client().await;
    let token = ok("create pat", within("create pat", admin.create_personal_access_token("probe", PersonalAccessTokenExpiry::NeverExpire)).await).token;
    let probe = server.anonymous_client().await;
    ok("token login", within("token login", probe.login_with_personal_access_token(&token)).await);
    let slow = server.anonymous_client().await;
    let login = tokio::spawn(async move {
        let result = slow.login_user(ROOT_USER, ROOT_PASSWORD).await.map(|_| ());
        (result, std::time::Instant::now())
    });
    // The login reaches the server and its check starts (were it not there yet, the ping below
    // would be answered at once without showing anything, and the login end well after it).
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    ok("ping", within("ping", probe.ping()).await);
    let pinged = std::time::Instant::now();
    let (result, logged_in) = within("password login", login).await.expect("login task");
    ok("password login", result);
    let ahead = logged_in.saturating_duration_since(pinged);
    assert!(ahead >= std::time::Duration::from_secs(1), "the ping was answered only {ahead:?} before the password login ended: it waited for the other client's password check");
}

/// The log at `info` is an audit trail: a sign-in refused for its credentials names the user
/// name (never the password), and each change of the metadata names its command, the user and
/// the session. Repeated refusals of one name are held back to one line per interval. The
/// node logged none of this below `debug` before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_sign_ins_and_metadata_changes_are_logged_at_info() {
    let server = TestServer::start();
    let guesser = server.anonymous_client().await;
    for _ in 0..3 {
        expect_code(
            "a wrong password",
            within("login", guesser.login_user(ROOT_USER, "guess-1234")).await,
            42,
        );
    }
    let client = server.root_client().await;
    create_stream_and_topic(&client, "audited", "t", 1).await;
    ok(
        "delete",
        within("delete", client.delete_stream(&name("audited"))).await,
    );
    let log = server.log();
    let refusals: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("sign-in refused"))
        .collect();
    assert_eq!(
        refusals.len(),
        1,
        "one line per name per interval: {refusals:#?}"
    );
    assert!(
        refusals[0].contains(" INFO ") && refusals[0].contains("user name \"iggy\""),
        "{refusals:?}"
    );
    assert!(!log.contains("guess-1234"), "the password is never logged");
    for command in ["stream.create", "topic.create", "stream.delete"] {
        assert!(
            log.lines()
                .any(|l| l.contains(" INFO ")
                    && l.contains(&format!("{command} by user 0 (session"))),
            "{command} in\n{log}"
        );
    }
}
