//! Personal access tokens: create, list, delete, and login with a token.

use crate::harness::*;
use iggy::prelude::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn created_tokens_are_listed_by_name_with_expiry() {
    let server = TestServer::start();
    let root = server.root_client().await;
    assert!(ok("list empty", within("list", root.get_personal_access_tokens()).await).is_empty());

    let never = ok(
        "create never-expiring",
        within("create", root.create_personal_access_token("ci-bot", PersonalAccessTokenExpiry::NeverExpire)).await,
    );
    assert!(!never.token.is_empty(), "a raw token is returned once");
    let before = IggyTimestamp::now().as_micros();
    let hour = ok(
        "create 1h",
        within(
            "create",
            root.create_personal_access_token(
                "deploy",
                PersonalAccessTokenExpiry::ExpireDuration(IggyDuration::from(3_600_000_000u64)),
            ),
        )
        .await,
    );
    let after = IggyTimestamp::now().as_micros();
    assert_ne!(never.token, hour.token, "tokens are unique");

    let mut list = ok("list", within("list", root.get_personal_access_tokens()).await);
    list.sort_by(|a, b| a.name.cmp(&b.name));
    let names: Vec<&str> = list.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(names, vec!["ci-bot", "deploy"]);
    assert!(list[0].expiry_at.is_none(), "ci never expires: {:?}", list[0].expiry_at);
    let expiry = list[1].expiry_at.expect("deploy expires").as_micros();
    assert!(
        expiry >= before + 3_600_000_000 && expiry <= after + 3_600_000_000,
        "deploy expires one hour after creation: {expiry} not in [{}, {}]",
        before + 3_600_000_000,
        after + 3_600_000_000
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_token_with_duplicate_name_fails_with_51() {
    let server = TestServer::start();
    let root = server.root_client().await;
    ok("create", within("create", root.create_personal_access_token("ci-bot", PersonalAccessTokenExpiry::NeverExpire)).await);
    expect_code(
        "duplicate token name",
        within("create", root.create_personal_access_token("ci-bot", PersonalAccessTokenExpiry::NeverExpire)).await,
        51,
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn login_with_token_signs_in_as_its_owner() {
    let server = TestServer::start();
    let root = server.root_client().await;
    create_stream_and_topic(&root, "s", "t", 1).await;
    let token = ok(
        "create",
        within("create", root.create_personal_access_token("ci-bot", PersonalAccessTokenExpiry::NeverExpire)).await,
    )
    .token;

    let client = server.anonymous_client().await;
    let identity = ok(
        "login_with_personal_access_token",
        within("pat login", client.login_with_personal_access_token(&token)).await,
    );
    assert_eq!(identity.user_id, DEFAULT_ROOT_USER_ID);
    let me = ok("get_me", within("me", client.get_me()).await);
    assert_eq!(me.user_id, Some(DEFAULT_ROOT_USER_ID));
    let streams = ok("get_streams", within("list", client.get_streams()).await);
    assert_eq!(streams.iter().map(|s| s.name.as_str()).collect::<Vec<_>>(), vec!["s"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn token_of_another_user_signs_in_as_that_user() {
    let server = TestServer::start();
    let root = server.root_client().await;
    ok(
        "create user",
        within(
            "create_user",
            root.create_user("alice", "alice-secret", UserStatus::Active, None, &UserCreateOptions::default()),
        )
        .await,
    );
    let alice = server.client_as("alice", "alice-secret").await;
    let token = ok(
        "alice creates a token",
        within("create", alice.create_personal_access_token("mine", PersonalAccessTokenExpiry::NeverExpire)).await,
    )
    .token;
    assert!(
        ok("root's tokens", within("list", root.get_personal_access_tokens()).await).is_empty(),
        "tokens are listed per user"
    );
    let client = server.anonymous_client().await;
    let identity = ok("pat login", within("pat login", client.login_with_personal_access_token(&token)).await);
    assert_eq!(identity.user_id, 1, "signed in as alice");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleted_token_is_unlisted_and_refused_with_53() {
    let server = TestServer::start();
    let root = server.root_client().await;
    let token = ok(
        "create",
        within("create", root.create_personal_access_token("ci-bot", PersonalAccessTokenExpiry::NeverExpire)).await,
    )
    .token;
    ok("create other", within("create", root.create_personal_access_token("keep", PersonalAccessTokenExpiry::NeverExpire)).await);
    ok("delete", within("delete", root.delete_personal_access_token("ci-bot")).await);
    let list = ok("list", within("list", root.get_personal_access_tokens()).await);
    assert_eq!(list.iter().map(|t| t.name.as_str()).collect::<Vec<_>>(), vec!["keep"]);

    let client = server.anonymous_client().await;
    expect_code(
        "login with a deleted token",
        within("pat login", client.login_with_personal_access_token(&token)).await,
        53,
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn login_with_unknown_token_is_refused_with_53() {
    let server = TestServer::start();
    let client = server.anonymous_client().await;
    expect_code(
        "login with a made-up token",
        within("pat login", client.login_with_personal_access_token("bm90LWEtcmVhbC10b2tlbg")).await,
        53,
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expired_token_is_refused() {
    let server = TestServer::start();
    let root = server.root_client().await;
    let token = ok(
        "create 1s token",
        within(
            "create",
            root.create_personal_access_token("short", PersonalAccessTokenExpiry::ExpireDuration(IggyDuration::from(1_000_000u64))),
        )
        .await,
    )
    .token;
    tokio::time::sleep(std::time::Duration::from_millis(1500)).await;
    let client = server.anonymous_client().await;
    let r = within("pat login", client.login_with_personal_access_token(&token)).await;
    let code = r.as_ref().err().map(IggyError::as_code);
    // PersonalAccessTokenExpired (54) as a status, or the eviction reason InvalidToken (53).
    assert!(matches!(code, Some(53) | Some(54)), "login with an expired token: {r:?}");
}

/// An expired token is deleted by the server, as upstream's token cleaner does: its name is
/// free again and it counts no more towards the user's limit of 100. A job that makes a
/// short-lived token under one name each run was refused with 51 (already exists) forever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_token_is_deleted_and_its_name_can_be_used_again() {
    let server = TestServer::start_with_env(&[("IGGY_SYSTEM_MAINTENANCE_INTERVAL_MS", "100")]);
    let root = server.root_client().await;
    let short = PersonalAccessTokenExpiry::ExpireDuration(IggyDuration::from(1_000_000u64));
    ok("create a 1 s token", within("create", root.create_personal_access_token("deploy", short)).await);
    ok("create a lasting token", within("create", root.create_personal_access_token("lasting", PersonalAccessTokenExpiry::NeverExpire)).await);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let names = loop {
        let tokens = ok("list", within("list", root.get_personal_access_tokens()).await);
        let names: Vec<String> = tokens.into_iter().map(|t| t.name).collect();
        if !names.iter().any(|n| n == "deploy") || std::time::Instant::now() > deadline {
            break names;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    };
    assert_eq!(names, vec!["lasting".to_string()], "the expired token is gone, the lasting one stays");
    let again = ok("create the name again", within("create", root.create_personal_access_token("deploy", PersonalAccessTokenExpiry::NeverExpire)).await);
    let client = server.anonymous_client().await;
    ok("login with the new token", within("login", client.login_with_personal_access_token(&again.token)).await);
}
