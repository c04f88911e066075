//! Descriptions of Postgres relations, columns and types, as read from the catalog (and kept
//! with each shape, serialized, to tell whether the table changed under it).

/// How a table identifies old rows in UPDATE and DELETE (its `REPLICA IDENTITY`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum ReplicaIdentity {
    /// Primary key columns only (`d`).
    Default,
    /// No old-row information (`n`).
    Nothing,
    /// Every column (`f`).
    Full,
    /// The columns of a chosen unique index (`i`).
    Index,
}

impl ReplicaIdentity {
    /// Reads the `relreplident` / pgoutput character.
    pub fn from_char(c: u8) -> Option<Self> {
        match c {
            b'd' => Some(Self::Default),
            b'n' => Some(Self::Nothing),
            b'f' => Some(Self::Full),
            b'i' => Some(Self::Index),
            _ => None,
        }
    }
}

/// What kind of type a column has, with what is needed to decode and describe it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum TypeKind {
    /// A built-in or extension base type, identified by its OID.
    Base,
    /// An enum; its values travel as their labels.
    Enum,
    /// A domain over another type; values travel as the base type's.
    Domain(Box<PgType>),
    /// An array of the element type.
    Array(Box<PgType>),
    /// Anything else (composite, range, multirange, pseudo-types).
    Other,
}

/// A Postgres type: OID, `typname` and kind.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PgType {
    /// `pg_type.oid`.
    pub oid: u32,
    /// `pg_type.typname`, e.g. `int4`, `_text`, or the enum's name.
    pub name: String,
    /// What kind of type this is.
    pub kind: TypeKind,
}

impl PgType {
    /// The type after looking through any domains.
    pub fn base(&self) -> &PgType {
        match &self.kind {
            TypeKind::Domain(base) => base.base(),
            _ => self,
        }
    }
}

/// One column of a relation.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ColumnDesc {
    /// Column name, unquoted.
    pub name: String,
    /// Column type.
    pub pg_type: PgType,
    /// `atttypmod` (-1 when none).
    pub type_mod: i32,
    /// `attnotnull`.
    pub not_null: bool,
    /// Position within the primary key, if the column is part of it.
    pub pk_index: Option<usize>,
    /// Declared array dimensions (`attndims`: `int4[][]` has 2); 0 for other columns, and for
    /// arrays whose dimensions were not declared (Postgres does not enforce them).
    #[serde(default)]
    pub array_dims: u32,
}

/// A table as Syncline sees it: identity, columns in attribute order, replica identity.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct RelationDesc {
    /// `pg_class.oid`.
    pub oid: u32,
    /// Schema name, unquoted.
    pub schema: String,
    /// Table name, unquoted.
    pub name: String,
    /// Columns in attribute-number order (dropped columns excluded).
    pub columns: Vec<ColumnDesc>,
    /// The table's replica identity.
    pub replica_identity: ReplicaIdentity,
}

impl RelationDesc {
    /// Finds a column by exact name.
    pub fn column(&self, name: &str) -> Option<(usize, &ColumnDesc)> {
        self.columns
            .iter()
            .enumerate()
            .find(|(_, c)| c.name == name)
    }

    /// Primary-key columns in key order.
    pub fn primary_key(&self) -> Vec<&ColumnDesc> {
        let mut pk: Vec<&ColumnDesc> = self
            .columns
            .iter()
            .filter(|c| c.pk_index.is_some())
            .collect();
        pk.sort_by_key(|c| c.pk_index);
        pk
    }
}
