use crate::support::{conformance, obj};
use fawn_checkpoint::*;
use serde_json::json;
use std::sync::Arc;

conformance!(store: assistant_crud_and_versions, assistant_search_and_count, system_assistant_upsert);

fn assistant(
    id: Option<&str>,
    graph: &str,
    name: &str,
    metadata: serde_json::Value,
) -> NewAssistant {
    NewAssistant {
        assistant_id: id.map(str::to_string),
        graph_id: graph.into(),
        config: obj(json!({"configurable": {"model": "m1"}})),
        context: obj(json!({"model": "m1"})),
        metadata: obj(metadata),
        name: name.into(),
        description: Some("first".into()),
        if_exists: IfExists::Raise,
    }
}

async fn assistant_crud_and_versions(db: Arc<dyn Persistence>) {
    let id = uuid::Uuid::new_v4().to_string();
    let a = db
        .create_assistant(assistant(
            Some(&id),
            "agent",
            "Helper",
            json!({"team": "x", "n": 1}),
        ))
        .await
        .unwrap();
    assert_eq!(a.assistant_id, id);
    assert_eq!(a.version, 1);
    assert_eq!(a.created_at, a.updated_at);
    assert_eq!(db.get_assistant(&id).await.unwrap(), Some(a.clone()));

    let dup = db
        .create_assistant(assistant(Some(&id), "agent", "Other", json!({})))
        .await
        .unwrap_err();
    assert_eq!(
        dup,
        StoreError::Conflict(format!("Assistant {id} already exists"))
    );
    let same = db
        .create_assistant(NewAssistant {
            if_exists: IfExists::DoNothing,
            ..assistant(Some(&id), "other", "Other", json!({}))
        })
        .await
        .unwrap();
    assert_eq!(same, a);
    let generated = db
        .create_assistant(assistant(None, "agent", "Gen", json!({})))
        .await
        .unwrap();
    assert_eq!(
        uuid::Uuid::parse_str(&generated.assistant_id)
            .unwrap()
            .get_version_num(),
        4
    );

    let v2 = db
        .update_assistant(
            &id,
            AssistantPatch {
                config: Some(obj(json!({"recursion_limit": 5}))),
                metadata: Some(obj(json!({"n": 2}))),
                description: Some(None),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(v2.version, 2);
    assert_eq!(
        v2.config,
        obj(json!({"recursion_limit": 5})),
        "config replaced"
    );
    assert_eq!(
        v2.metadata,
        obj(json!({"team": "x", "n": 2})),
        "metadata merged"
    );
    assert_eq!(v2.name, "Helper");
    assert_eq!(v2.description, None);
    assert_eq!(v2.context, a.context);
    assert!(v2.updated_at >= a.updated_at);
    assert_eq!(v2.created_at, a.created_at);
    let v3 = db
        .update_assistant(
            &id,
            AssistantPatch {
                name: Some("Renamed".into()),
                graph_id: Some("agent2".into()),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(v3.version, 3);
    assert_eq!(v3.graph_id, "agent2");

    let versions = db.assistant_versions(&id, None, 10, 0).await.unwrap();
    assert_eq!(
        versions.iter().map(|v| v.version).collect::<Vec<_>>(),
        vec![3, 2, 1]
    );
    assert_eq!(versions[2].name, "Helper");
    assert_eq!(versions[2].description.as_deref(), Some("first"));
    let paged = db.assistant_versions(&id, None, 1, 1).await.unwrap();
    assert_eq!(paged[0].version, 2);
    let filtered = db
        .assistant_versions(&id, Some(&obj(json!({"n": 1}))), 10, 0)
        .await
        .unwrap();
    assert_eq!(
        filtered.iter().map(|v| v.version).collect::<Vec<_>>(),
        vec![1]
    );

    let back = db.set_latest_version(&id, 1).await.unwrap();
    assert_eq!(back.version, 1);
    assert_eq!(back.name, "Helper");
    assert_eq!(back.graph_id, "agent");
    assert_eq!(back.metadata, a.metadata);
    assert_eq!(db.get_assistant(&id).await.unwrap().unwrap().version, 1);
    // The next change still gets a fresh version number.
    let v4 = db
        .update_assistant(&id, AssistantPatch::default())
        .await
        .unwrap();
    assert_eq!(v4.version, 4);
    assert_eq!(v4.name, "Helper");
    assert!(matches!(
        db.set_latest_version(&id, 99).await.unwrap_err(),
        StoreError::NotFound(_)
    ));
    let missing = uuid::Uuid::new_v4().to_string();
    assert_eq!(
        db.update_assistant(&missing, AssistantPatch::default())
            .await
            .unwrap_err(),
        StoreError::NotFound(format!("Assistant {missing} not found"))
    );

    assert!(db.delete_assistant(&id).await.unwrap());
    assert!(!db.delete_assistant(&id).await.unwrap());
    assert_eq!(db.get_assistant(&id).await.unwrap(), None);
    assert!(
        db.assistant_versions(&id, None, 10, 0)
            .await
            .unwrap()
            .is_empty()
    );
}

async fn assistant_search_and_count(db: Arc<dyn Persistence>) {
    let mut ids = Vec::new();
    for (graph, name, meta) in [
        (
            "agent",
            "Research Bot",
            json!({"team": "a", "tier": {"level": 1}}),
        ),
        (
            "agent",
            "writer",
            json!({"team": "b", "tier": {"level": 2}}),
        ),
        ("coder", "Code 100%_done", json!({"team": "a"})),
        ("coder", "zeta", json!({"team": "c"})),
    ] {
        ids.push(
            db.create_assistant(assistant(None, graph, name, meta))
                .await
                .unwrap()
                .assistant_id,
        );
    }
    let search =
        |filter: AssistantFilter, sort_by: AssistantSort, order: SortOrder, limit, offset| {
            let db = db.clone();
            async move {
                db.search_assistants(&AssistantQuery {
                    filter,
                    limit,
                    offset,
                    sort_by,
                    sort_order: order,
                })
                .await
                .unwrap()
            }
        };
    let names = |p: &Page<Assistant>| p.items.iter().map(|a| a.name.clone()).collect::<Vec<_>>();
    let all = search(
        AssistantFilter::default(),
        AssistantSort::CreatedAt,
        SortOrder::Desc,
        10,
        0,
    )
    .await;
    assert_eq!(
        names(&all),
        vec!["zeta", "Code 100%_done", "writer", "Research Bot"]
    );
    assert_eq!(all.total, 4);
    let by_graph = search(
        AssistantFilter {
            graph_id: Some("coder".into()),
            ..Default::default()
        },
        AssistantSort::Name,
        SortOrder::Asc,
        10,
        0,
    )
    .await;
    assert_eq!(names(&by_graph), vec!["Code 100%_done", "zeta"]);
    let by_meta = search(
        AssistantFilter {
            metadata: Some(obj(json!({"team": "a"}))),
            ..Default::default()
        },
        AssistantSort::CreatedAt,
        SortOrder::Asc,
        10,
        0,
    )
    .await;
    assert_eq!(names(&by_meta), vec!["Research Bot", "Code 100%_done"]);
    let nested = search(
        AssistantFilter {
            metadata: Some(obj(json!({"tier": {"level": 2}}))),
            ..Default::default()
        },
        AssistantSort::CreatedAt,
        SortOrder::Asc,
        10,
        0,
    )
    .await;
    assert_eq!(names(&nested), vec!["writer"]);
    let by_name = search(
        AssistantFilter {
            name: Some("BOT".into()),
            ..Default::default()
        },
        AssistantSort::CreatedAt,
        SortOrder::Asc,
        10,
        0,
    )
    .await;
    assert_eq!(
        names(&by_name),
        vec!["Research Bot"],
        "case-insensitive substring"
    );
    let wildcard = search(
        AssistantFilter {
            name: Some("0%_".into()),
            ..Default::default()
        },
        AssistantSort::CreatedAt,
        SortOrder::Asc,
        10,
        0,
    )
    .await;
    assert_eq!(
        names(&wildcard),
        vec!["Code 100%_done"],
        "wildcards are literal"
    );
    let page = search(
        AssistantFilter::default(),
        AssistantSort::Name,
        SortOrder::Asc,
        2,
        1,
    )
    .await;
    assert_eq!(names(&page), vec!["Research Bot", "writer"]);
    assert_eq!(page.total, 4);
    for sort in [
        AssistantSort::AssistantId,
        AssistantSort::GraphId,
        AssistantSort::UpdatedAt,
    ] {
        assert_eq!(
            search(AssistantFilter::default(), sort, SortOrder::Asc, 10, 0)
                .await
                .items
                .len(),
            4
        );
    }
    assert_eq!(
        db.count_assistants(&AssistantFilter::default())
            .await
            .unwrap(),
        4
    );
    assert_eq!(
        db.count_assistants(&AssistantFilter {
            graph_id: Some("agent".into()),
            metadata: Some(obj(json!({"tier": {}}))),
            ..Default::default()
        })
        .await
        .unwrap(),
        2
    );
}

async fn system_assistant_upsert(db: Arc<dyn Persistence>) {
    let id = "fe096781-5601-53d2-b2f6-0d3403f7e9ca";
    let new = || NewAssistant {
        assistant_id: Some(id.into()),
        graph_id: "agent".into(),
        metadata: obj(json!({"created_by": "system"})),
        name: "agent".into(),
        ..Default::default()
    };
    let a = db.upsert_system_assistant(new()).await.unwrap();
    assert_eq!(a.version, 1);
    assert_eq!(a.description, None);
    let b = db.upsert_system_assistant(new()).await.unwrap();
    assert_eq!(a, b);
    assert_eq!(
        db.assistant_versions(id, None, 10, 0).await.unwrap().len(),
        1
    );

    // truncate keeps system assistants.
    db.create_assistant(assistant(None, "agent", "user-made", json!({})))
        .await
        .unwrap();
    db.truncate(&Truncate {
        assistants: true,
        ..Default::default()
    })
    .await
    .unwrap();
    let left = db
        .search_assistants(&AssistantQuery {
            limit: 10,
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(left.items, vec![a]);
}
