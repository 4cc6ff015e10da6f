//! The config file as read: its path and text, kept after parsing so that a value refused later
//! (a range or a combination that `validate` checks, not the parser) can be pointed at in the
//! file, by line and column, instead of only by its key.

#[allow(unused_imports)]
use super::*;

/// A config file's path and text.
#[derive(Clone, Debug)]
pub struct ConfigFile {
    path: String,
    text: String,
}

/// Where a key's value is written in the file: 1-based line and column (in characters).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Place {
    pub line: usize,
    pub column: usize,
}

impl ConfigFile {
    /// Reads `path`; the error names it (the I/O error is its source).
    pub fn read(path: &Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.display().to_string(),
            source,
        })?;
        Ok(Self::new(path.display().to_string(), text))
    }

    /// A file's text, named `path` in messages.
    pub fn new(path: impl Into<String>, text: impl Into<String>) -> Self {
        ConfigFile {
            path: path.into(),
            text: text.into(),
        }
    }

    /// The path as given, for messages.
    pub fn path(&self) -> &str {
        &self.path
    }

    /// The settings; a syntax error, an unknown key or a value of the wrong type names the
    /// file, its line and column ([`ConfigError::Parse`]).
    pub fn parse(&self) -> Result<ConfigToml, ConfigError> {
        ConfigToml::parse(&self.text, &self.path)
    }

    /// Where the file sets `key` (`video.fps`, also written `[video] fps = …` or as an inline
    /// table); None when it does not set it (or the file does not parse).
    pub fn place(&self, key: &str) -> Option<Place> {
        let doc = toml::de::DeTable::parse(&self.text).ok()?;
        let mut parts = key.split('.');
        let mut value = doc.get_ref().get(parts.next()?)?;
        for part in parts {
            value = value.get_ref().get(part)?;
        }
        let before = self.text.get(..value.span().start)?;
        let line_start = before.rfind('\n').map_or(0, |i| i + 1);
        Some(Place {
            line: before.matches('\n').count() + 1,
            column: before[line_start..].chars().count() + 1,
        })
    }
}
