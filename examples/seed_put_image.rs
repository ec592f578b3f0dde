//! An image in a dialog, with a caption: `cargo run --example seed_put_image`.
//!
//! `Dialog::put(role).caption(..).image(..)` appends an image (a path, bytes
//! or a URL) as one user message of two parts, picture and caption; an
//! agent does the same with `receive_image` on its active dialog. Offline on
//! `mock/echo`, which answers with the message's text (the caption).

use std::path::Path;

use lllm::dialog::{Dialog, Role};
use lllm::{Agent, BoxError};

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let image = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/seeds/night.png");

    // On a dialog of your own.
    let mut dialog = Dialog::new("viewer", "viewer_main");
    let message = dialog
        .put(Role::User)
        .caption("The sky tonight.")
        .image(&image)?;
    assert_eq!(message.parts[0].to_string(), "<image image/png>");
    println!("{}", dialog.overview(60));

    // Through an agent, and answered.
    let mut agent = Agent::builder("mock/echo")
        .system("You describe pictures.")
        .build()?;
    agent.open("look")?;
    let message = agent.receive_image(&image, Some("What is in this picture?"))?;
    assert_eq!(message.parts.len(), 2, "the image and its caption");
    let reply = agent.respond().await?;
    println!("reply: {}", reply.content);
    assert_eq!(reply.content, "What is in this picture?");
    Ok(())
}
